/* procmem.c - private vs store memory of a process from /proc/PID/smaps. */
#include "profiler/procmem.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"

/* A mapping header line: "start-end perms offset dev inode [path]". */
static bool is_mapping_header(const char *line, const char **path)
{
    unsigned long a, b;
    int n = 0;
    if (sscanf(line, "%lx-%lx %*s %*s %*s %*s%n", &a, &b, &n) != 2 || n == 0)
        return false;
    const char *p = line + n;
    while (*p == ' ')
        p++;
    *path = p;
    return true;
}

int proc_mem_read(pid_t pid, const char *store_dir, struct proc_mem *out, tetris_error *err)
{
    char file[64], line[PATH_MAX + 256];
    size_t store_len = store_dir != NULL ? strlen(store_dir) : 0;
    bool in_store = false;

    memset(out, 0, sizeof(*out));
    snprintf(file, sizeof(file), "/proc/%d/smaps", (int)pid);
    cleanup_fclose FILE *f = fopen(file, "re");
    if (f == NULL)
        return tetris_fail(err, errno == ENOENT ? TETRIS_E_NOTFOUND : TETRIS_E_IO, errno,
                           "open %s", file);
    while (fgets(line, sizeof(line), f) != NULL) {
        const char *path;
        uint64_t kb;
        line[strcspn(line, "\n")] = '\0';
        if (is_mapping_header(line, &path)) {
            in_store = store_len > 0 && strncmp(path, store_dir, store_len) == 0 &&
                       (path[store_len] == '/' || path[store_len] == '\0');
            continue;
        }
        if (sscanf(line, "Rss: %" SCNu64 " kB", &kb) == 1) {
            out->rss += kb * 1024;
            if (in_store)
                out->store_rss += kb * 1024;
        } else if (!in_store && (sscanf(line, "Private_Clean: %" SCNu64 " kB", &kb) == 1 ||
                                 sscanf(line, "Private_Dirty: %" SCNu64 " kB", &kb) == 1)) {
            out->private_bytes += kb * 1024;
        }
    }
    if (ferror(f))
        return tetris_fail(err, TETRIS_E_IO, errno, "read %s", file);
    return 0;
}
