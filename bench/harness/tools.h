/* tools.h: the reports made from a saved JSON document (stubs until html.c and compare.c land). */
#ifndef SLUICE_BENCH_TOOLS_H
#define SLUICE_BENCH_TOOLS_H
#include <jansson.h>
int sb_html_write(json_t *doc, const char *path, char *err, size_t errlen);
int sb_report_main(int argc, char **argv);
int sb_compare_main(int argc, char **argv);
#endif
