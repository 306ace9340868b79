/*
 * config_sections.c: the table of the configuration file's sections (see
 * config_sections.h), which wires each section's module into the option
 * layer without that layer including it.
 */
#include "sluice/tenants/config_sections.h"

#include "sluice/config/models_config.h"
#include "sluice/tenants/keys.h"

#include <stddef.h>

/* cfg->keys, which a reload may have taken (and set to NULL) before. */
static void keys_release(struct sl_config *cfg)
{
	sl_keys_free(cfg->keys);
}

const struct sl_config_section sl_config_sections[] = {
    {
        .name = "models",
        .apply = sl_models_config_apply,
        .print = sl_models_config_print,
        .check = sl_models_config_check,
        .release = sl_models_config_free,
        .runs_tools = sl_models_config_runs_tools,
    },
    {
        .name = "keys",
        .apply = sl_keys_config_apply,
        .print = sl_keys_config_print,
        .release = keys_release,
    },
    {.name = NULL},
};
