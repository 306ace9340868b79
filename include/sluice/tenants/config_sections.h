/*
 * config_sections.h: the configuration file's sections, each with the
 * module that reads it: `models:` (models_config.h) and `keys:` (keys.h).
 *
 * The option layer (config.h) reads the file but knows no section: it is
 * handed this table (struct sl_config_section) by whoever calls
 * sl_config_parse(). The table lives here, in the lowest layer that sees
 * both modules, so that the option layer includes neither, and the tests
 * read a file with every section as sluice does.
 */
#ifndef SLUICE_CONFIG_SECTIONS_H
#define SLUICE_CONFIG_SECTIONS_H

#include "sluice/config/config.h"

/* models:, then keys: (--check-config prints them in this order). */
extern const struct sl_config_section sl_config_sections[];

#endif
