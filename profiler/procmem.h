/* procmem.h - how much memory a process uses, split the way tetris
 * accounts for it: private memory (its own pages) and the tensor-store
 * mappings it shares with every other instance on the node. */
#ifndef TETRIS_PROCMEM_H
#define TETRIS_PROCMEM_H

#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

struct proc_mem {
    uint64_t private_bytes; /* Private_Clean + Private_Dirty outside the store */
    uint64_t store_rss;     /* resident bytes of mappings of store files */
    uint64_t rss;           /* everything resident */
};

/* Reads /proc/PID/smaps. Mappings of files under store_dir (NULL: none)
 * count as store memory even when this process is their only user, since
 * on a node they are the instances' shared copy. */
int proc_mem_read(pid_t pid, const char *store_dir, struct proc_mem *out, tetris_error *err);

#endif
