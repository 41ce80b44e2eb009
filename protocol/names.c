/* names.c - the checks that go with the names (see names.h). */
#include "protocol/names.h"

#include <ctype.h>
#include <string.h>

bool names_label_value_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63 || !isalnum((unsigned char)s[0]) || !isalnum((unsigned char)s[n - 1]))
        return false;
    for (; *s != '\0'; s++)
        if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_' && *s != '.')
            return false;
    return true;
}
