/* test_assemble.c: placeholder while the recordings are written. */
#include "sluice/assemble.h"
int main(void) { return 0; }
