/* ids.c — validation of item and user ids. */
#include "core/ids.h"

static bool id_char_ok(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == ':' || c == '~' || c == '-';
}

bool id_valid(span_t s)
{
    if (s.len == 0 || s.len > ID_MAX_LEN)
        return false;
    if (span_eq_str(s, ".") || span_eq_str(s, ".."))
        return false;
    for (size_t i = 0; i < s.len; i++)
        if (!id_char_ok((unsigned char)s.ptr[i]))
            return false;
    return true;
}
