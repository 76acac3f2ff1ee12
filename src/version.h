/* version.h — the version both programs report: the VERSION file, with +g<commit> when built in a
 * git checkout (or make TALLY_VERSION=...); generated into build/gen/version.c by the Makefile. */
#ifndef TALLY_VERSION_H
#define TALLY_VERSION_H

extern const char tally_version[];

#endif
