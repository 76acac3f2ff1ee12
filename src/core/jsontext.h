/* jsontext.h — how tally writes JSON documents as text. */
#ifndef TALLY_CORE_JSONTEXT_H
#define TALLY_CORE_JSONTEXT_H

#include <jansson.h>

/* To be or-ed into the flags of every json_dumps: jansson's default prints a real with 17
 * significant digits, enough to tell any two doubles apart but also enough to show the binary
 * approximation, so 0.1 comes out as 0.10000000000000001. Any decimal of at most 15 significant
 * digits survives the trip through a double and back, so with 15 a value computed as a short
 * decimal (a lag in milliseconds over 1000, a rate, an error bound) prints as that decimal; the
 * last two digits of a long one are below what any of these figures means. */
#define JSON_REALS JSON_REAL_PRECISION(15)

#endif
