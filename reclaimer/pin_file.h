/* pin_file.h - the pin file: which tensors the cluster side wants kept
 * warm, in which store. Written by tetris-node-pins (or an operator), read
 * by the daemon before every reclaim pass; whoever can write the file can
 * keep bytes resident, so the daemon trusts its location, not its text:
 * every line is checked and one bad line refuses the whole file (the daemon
 * then keeps its previous pins).
 *
 * Format, per line: a hex SHA-256 digest ("sha256:" optional), then the
 * tenant whose store keeps it (none: the shared store only), blanks between;
 * '#' starts a comment; blank lines are skipped. */
#ifndef TETRIS_PIN_FILE_H
#define TETRIS_PIN_FILE_H

#include <stddef.h>

#include "common/error.h"
#include "tensorstore/store.h"

/* The largest pin file read: a million pins of a full line each. */
#define PIN_FILE_MAX_BYTES (64u << 20)
/* The longest line: a prefixed digest and a tenant name, with room for
 * blanks and a comment. */
#define PIN_LINE_MAX 255

/* One line of the pin file: a digest kept warm in one store. */
struct pin {
    char tenant[64]; /* "" for the shared store */
    tensor_digest digest;
};

/* Parses text (len bytes; NULs are an error) into a malloc'd array of
 * pins (*out, NULL when none). name labels errors: TETRIS_E_FORMAT
 * "name:LINE: ..." for a bad digest, tenant, or a line longer than
 * PIN_LINE_MAX; TETRIS_E_NOMEM. */
int pin_file_parse(const char *text, size_t len, const char *name, struct pin **out, size_t *n,
                   tetris_error *err);

/* Reads and parses the file at path; a missing file pins nothing (0, *out
 * NULL, *n 0). */
int pin_file_read(const char *path, struct pin **out, size_t *n, tetris_error *err);

#endif
