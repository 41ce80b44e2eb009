/* tetris-bench-map.c - what an instance pays to use resident tensors: maps
 * every tensor of a manifest read-only from a store, then reads one byte of
 * every page the way a first inference would, and reports both times and how
 * the kernel backed the mappings (huge or base pages, from /proc/self/smaps)
 * and how large the page tables for them grew.
 *
 * run-bench.sh uses it to show what tmpfs huge pages change: mapping costs
 * about the same either way, first touch does not (one fault per 2 MiB
 * instead of per 4 KiB). */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/options.h"
#include "model/manifest.h"
#include "model/model.h"
#include "tensorstore/store.h"

enum { EXIT_OK = 0, EXIT_ERROR = 1, EXIT_USAGE = 2 };

struct huge_kb {
    uint64_t anon_huge, shmem_pmd, file_pmd;
    uint64_t page_tables; /* VmPTE of the whole process */
};

/* Sums the huge-page fields of our mappings of files under root. */
static int smaps_huge(const char *root, struct huge_kb *out, tetris_error *err)
{
    cleanup_fclose FILE *f = fopen("/proc/self/smaps", "re");
    if (f == NULL)
        return tetris_fail(err, TETRIS_E_IO, errno, "open /proc/self/smaps");
    size_t root_len = strlen(root);
    bool in_store = false;
    char line[8192];
    memset(out, 0, sizeof *out);
    while (fgets(line, sizeof line, f) != NULL) {
        char first[64];
        if (sscanf(line, "%63s", first) != 1)
            continue;
        if (first[strlen(first) - 1] != ':') {
            /* A mapping's header: "start-end perms offset dev inode [path]". */
            char path[4096] = "";
            sscanf(line, "%*s %*s %*s %*s %*s %4095s", path);
            in_store = strncmp(path, root, root_len) == 0 && path[root_len] == '/';
            continue;
        }
        unsigned long long kb;
        if (!in_store)
            continue;
        if (sscanf(line, "AnonHugePages: %llu", &kb) == 1)
            out->anon_huge += kb;
        else if (sscanf(line, "ShmemPmdMapped: %llu", &kb) == 1)
            out->shmem_pmd += kb;
        else if (sscanf(line, "FilePmdMapped: %llu", &kb) == 1)
            out->file_pmd += kb;
    }
    if (ferror(f))
        return tetris_fail(err, TETRIS_E_IO, errno, "read /proc/self/smaps");
    return 0;
}

static int status_page_tables(uint64_t *kb_out, tetris_error *err)
{
    cleanup_fclose FILE *f = fopen("/proc/self/status", "re");
    if (f == NULL)
        return tetris_fail(err, TETRIS_E_IO, errno, "open /proc/self/status");
    char line[256];
    unsigned long long kb;
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmPTE: %llu", &kb) == 1) {
            *kb_out = kb;
            return 0;
        }
    return tetris_fail(err, TETRIS_E_NOTFOUND, 0, "no VmPTE in /proc/self/status");
}

/* One byte per page, summed so the reads cannot be optimised away. */
static uint64_t touch_pages(const store_mapping *maps, size_t n)
{
    long page = sysconf(_SC_PAGESIZE);
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        const volatile uint8_t *p = maps[i].data;
        for (uint64_t off = 0; off < maps[i].nbytes; off += (uint64_t)page)
            sum += p[off];
    }
    return sum;
}

static int run(const char *store_dir, const char *manifest_path, tetris_error *err)
{
    model *m = NULL;
    int r = manifest_read_file(manifest_path, &m, err);
    if (r < 0)
        return r;
    struct store_options so = {.read_only = true};
    store *s = NULL;
    store_mapping *maps = calloc(m->n_tensors ? m->n_tensors : 1, sizeof *maps);
    size_t mapped = 0;
    uint64_t bytes = 0;
    if (maps == NULL) {
        r = tetris_fail(err, TETRIS_E_NOMEM, errno, "mapping table");
        goto out;
    }
    if ((r = store_open(store_dir, &so, &s, err)) < 0)
        goto out;

    double t0 = clock_now_ms();
    for (; mapped < m->n_tensors; mapped++) {
        const tensor_desc *t = &m->tensors[mapped];
        if (!t->has_digest) {
            r = tetris_fail(err, TETRIS_E_FORMAT, 0, "manifest tensor %s has no digest", t->name);
            goto out;
        }
        if ((r = store_map_tensor(s, &t->meta.digest, &maps[mapped], err)) < 0) {
            tetris_wrap(err, "tensor %s", t->name);
            goto out;
        }
        bytes += maps[mapped].nbytes;
    }
    double t1 = clock_now_ms();
    uint64_t sum = touch_pages(maps, mapped);
    double t2 = clock_now_ms();

    struct huge_kb huge;
    if ((r = smaps_huge(store_root(s), &huge, err)) < 0 ||
        (r = status_page_tables(&huge.page_tables, err)) < 0)
        goto out;
    printf("{\"tensors\":%zu,\"bytes\":%" PRIu64 ",\"map_ms\":%.3f,\"touch_ms\":%.3f,"
           "\"anon_huge_kb\":%" PRIu64 ",\"shmem_pmd_kb\":%" PRIu64 ",\"file_pmd_kb\":%" PRIu64
           ",\"vm_pte_kb\":%" PRIu64 ",\"checksum\":%" PRIu64 "}\n",
           mapped, bytes, t1 - t0, t2 - t1, huge.anon_huge, huge.shmem_pmd, huge.file_pmd,
           huge.page_tables, sum);
    if (fflush(stdout) != 0)
        r = tetris_fail(err, TETRIS_E_IO, errno, "write stdout");
out:
    for (size_t i = 0; i < mapped; i++)
        store_unmap_tensor(&maps[i]);
    free(maps);
    if (s != NULL)
        store_close(s);
    model_free(m);
    return r;
}

int main(int argc, char **argv)
{
    const char *store_dir = NULL, *manifest = NULL;
    const struct opt_spec options[] = {
        {.name = "store",
         .short_name = 's',
         .type = OPT_TYPE_STRING,
         .dest = &store_dir,
         .meta = "DIR",
         .help = "the store (read only; nothing is written)"},
        {.name = "manifest",
         .short_name = 'm',
         .type = OPT_TYPE_STRING,
         .dest = &manifest,
         .meta = "FILE",
         .help = "the model's manifest (tetris-agent index)"},
        {0},
    };
    const struct opt_program prog = {
        .name = "tetris-bench-map",
        .synopsis = "--store DIR --manifest MANIFEST",
        .about = "Maps every tensor of MANIFEST read-only from the store DIR (all must be\n"
                 "resident), reads one byte of every page, and prints one JSON object:\n"
                 "tensors, bytes, map_ms, touch_ms, and the huge-page fields of the mappings\n"
                 "from /proc/self/smaps: anon_huge_kb, shmem_pmd_kb, file_pmd_kb; and the\n"
                 "process's page tables then (vm_pte_kb, from /proc/self/status).\n",
        .options = options,
        .epilogue = "Exit status: 0 measured, 1 error (a tensor missing, I/O), 2 usage error.\n",
    };
    int first;

    log_init(argv[0]);
    if ((first = opt_parse(&prog, argc, argv)) < 0)
        return EXIT_USAGE;
    if (first != argc)
        return opt_usage_error(&prog, "unexpected argument '%s'", argv[first]), EXIT_USAGE;
    if (store_dir == NULL || manifest == NULL)
        return opt_usage_error(&prog, "--store and --manifest are required"), EXIT_USAGE;
    tetris_error err = {0};
    if (run(store_dir, manifest, &err) < 0) {
        log_error("event=failed code=%s msg=%s", tetris_code_name(err.code), LOG_Q(err.msg));
        return EXIT_ERROR;
    }
    return EXIT_OK;
}
