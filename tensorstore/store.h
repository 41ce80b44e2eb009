/* store.h - the node's tensor store: one read-only copy of each distinct
 * tensor in a directory on tmpfs, mapped by every instance that needs it.
 *
 * Layout of a store root DIR (or DIR/tenants/NAME for a dedicated tenant
 * store, laid out the same way). Owned by the node daemon's uid; a writer
 * refuses a root it does not own or that group or others may write.
 *   public/                  what function pods mount, read-only, and all
 *                            they can reach: nothing in it is ever locked
 *     .tetris-store          format marker + options (JSON, format 2)
 *     tensors/XX/<hex digest>  tensor bytes followed by a fixed trailer
 *                            (magic, dtype, shape, nbytes, crc32, digest);
 *                            mode 0444; only complete, verified files appear
 *     ingest.sock            the node daemon's ingest socket
 *   private/                 mode 0700: the writers' coordination
 *     tmp/                   in-progress ingests (never mapped)
 *     locks/XXX              per-tensor lock stripes (flock), by digest prefix
 *     holders/<id>.ref       one file per live holder: the digests it maps;
 *                            the holder keeps an flock on it, so a holder
 *                            file whose lock can be taken belongs to a dead
 *                            process and its references can be released
 *     holders/<name>.keep    a kept holder: references held for something
 *                            that is not a process (a mounted CSI volume),
 *                            live for as long as the file exists; written
 *                            whole (temp file, then rename), removed only
 *                            by store_kept_release, never by repair
 *     quarantine/            tensors that failed a scrub (no new mappings)
 *     use.lock               shared by writers while they record references
 *                            and map; exclusive for a reclaim pass, so a
 *                            tensor is never removed between "referenced"
 *                            and "mapped"
 *     reclaimer.state        the node daemon's last-use times
 *     volumes/               tetris-csi's volumes (reclaimer/csi/volumes.h)
 *   tenants/NAME/            tenant stores (the shared store's pods see none)
 * Format 1 stores (all of it in one directory) are refused with a message
 * saying how to replace them: a store is a cache.
 *
 * Every file is opened relative to the handle's directory descriptors
 * without following links (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS,
 * else O_NOFOLLOW per component); temp names are random and created
 * O_EXCL; every lock wait ends after a bounded time.
 *
 * Invariants, where they are asserted, and the tests that check them:
 *   - a tensor file in tensors/ is complete and its bytes hash to its name:
 *     only a verified temp file is renamed in (assert in publish.c
 *     finish_file); tests/tensorstore/test_store.c
 *     publish_rejects_wrong_bytes_and_bad_meta,
 *     chunked_publish_matches_and_verifies,
 *     computed_publish_names_the_file_by_its_bytes; a SIGKILL at any
 *     instant leaves nothing partial: tests/tensorstore/test-crash.sh;
 *   - mappings are PROT_READ shared: test_store.c
 *     write_through_mapping_faults, read_only_store_maps_but_refuses_writes;
 *   - concurrent publishers of one digest produce one file:
 *     tests/tensorstore/test-concurrent.sh;
 *   - a tensor referenced by a live holder is never removed, and a holder
 *     is recorded before its tensors are mapped (use.lock; asserted in
 *     agent.c map_tensor_only): test_store.c
 *     holder_records_references, killed_holder_is_found_dead_and_released,
 *     use_lock_excludes_reclaim, remove_and_quarantine_keep_existing_mappings,
 *     kept_holder_survives_repair_until_released.
 * Assertions are on in every build (none defines NDEBUG): a broken
 * invariant stops the process rather than publish or remove wrongly. */
#ifndef TETRIS_STORE_H
#define TETRIS_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "tensorstore/digest.h"
#include "common/error.h"

#define STORE_DEFAULT_DIR "/dev/shm/tetris"
#define STORE_PUBLIC_DIR "public"
#define STORE_PRIVATE_DIR "private"

typedef struct store store;

struct store_options {
    const char *tenant;      /* NULL: the shared store; else DIR/tenants/NAME */
    uint64_t capacity_bytes; /* 0: unlimited; else ingests past it fail FULL */
    bool create;             /* create the layout if missing (needs write access) */
    bool read_only;          /* open for mapping only (a read-only mount) */
};

/* dir NULL means STORE_DEFAULT_DIR. A store created with a capacity keeps
 * it in .tetris-store; a non-zero capacity_bytes overrides it for this
 * handle only. A read-only handle accepts a store root or a public/ on its
 * own (a function pod's mount of it). TETRIS_E_NOTFOUND if there is no
 * store and create is false, TETRIS_E_INVAL for a bad tenant name (allowed:
 * [a-z0-9._-], no ".."), TETRIS_E_DENIED for a writer whose root (or
 * public/, private/) is a link, not its own, or writable by others,
 * TETRIS_E_FORMAT for a format 1 store. A handle may be shared by threads.
 * Close holders before their store. */
int store_open(const char *dir, const struct store_options *opts, store **out, tetris_error *err);
void store_close(store *s);
const char *store_root(const store *s); /* the resolved directory (tenant included) */
/* 0 if name can be a tenant's (DIR/tenants/NAME stays under DIR), else
 * TETRIS_E_INVAL saying why; store_open checks the same. */
int store_tenant_check(const char *name, tetris_error *err);
/* What pods mount: tensors/ and the ingest socket (root/public, or the
 * directory opened when that was a public/ itself). */
const char *store_public_dir(const store *s);
uint64_t store_capacity(const store *s);

/* ---- mapping ---- */

typedef struct store_mapping {
    const void *data; /* PROT_READ, MAP_SHARED; a write through it faults */
    uint64_t nbytes;
    tensor_meta meta; /* from the trailer */
    void *map_base;   /* for munmap */
    size_t map_len;
    /* STORE_POPULATE_MADVISE on a kernel without MADV_POPULATE_READ: the
     * page tables were filled by reading a byte of each page instead. */
    bool populated_by_reads;
} store_mapping;

/* Maps a resident tensor read-only. TETRIS_E_NOTFOUND if absent or
 * quarantined; TETRIS_E_CORRUPT if its trailer does not match the digest. */
int store_map_tensor(store *s, const tensor_digest *d, store_mapping *out, tetris_error *err);
/* How a mapping's page tables are filled: on first touch (NONE: one fault
 * per page, paid by whoever reads first), by mmap (MAP: MAP_POPULATE), or
 * right after it (MADVISE: MADV_POPULATE_READ, Linux 5.14+; older kernels
 * get one read per page instead). Either populated way moves the faults
 * from the first inference into the load. */
enum store_populate { STORE_POPULATE_NONE = 0, STORE_POPULATE_MAP, STORE_POPULATE_MADVISE };
int store_map_tensor_populated(store *s, const tensor_digest *d, enum store_populate how,
                               store_mapping *out, tetris_error *err);
void store_unmap_tensor(store_mapping *m);
/* How many more mappings this process may create: vm.max_map_count less
 * the mappings it has (and a small margin). Each mapped tensor is one; a
 * model of more tensors than this cannot be mapped whole, and
 * store_map_tensor past the limit fails TETRIS_E_NOMEM with a message
 * naming vm.max_map_count. Reads /proc/self/maps: once per model, not per
 * tensor. */
int store_map_budget(uint64_t *out, tetris_error *err);
/* One of this process's mappings, as /proc/self/maps lists it. */
typedef struct store_own_mapping {
    uintptr_t start, end;
    dev_t dev;
    unsigned long inode;
    const char *path; /* NULL for an anonymous mapping; valid during the call only */
} store_own_mapping;
/* Calls fn on each of this process's mappings, in address order; a
 * non-zero return of fn stops the walk and is returned. */
int store_each_own_mapping(int (*fn)(void *ctx, const store_own_mapping *m), void *ctx,
                           tetris_error *err);
/* Marks every mapping this process has of the file at path (found in
 * /proc/self/maps by device and inode) MADV_NOHUGEPAGE: for a file
 * published on 4 KiB pages (STORE_PUBLISH_SMALL_PAGES) that a library maps
 * itself, such as ONNX Runtime its external data. On a tmpfs mounted
 * huge=, khugepaged moves a file's pages onto 2 MiB pages through any
 * mapping eligible for them (seen within a minute; BENCHMARKS.md); these
 * are not. *marked: how many mappings (0 when none, not an error). */
int store_keep_small_pages(const char *path, size_t *marked, tetris_error *err);
/* The same for what programs this process starts map: a runtime that maps
 * a form's data itself (a stock runtime reading a model view) cannot be
 * told, so the process that starts it keeps every mapping made without
 * MADV_HUGEPAGE, by it and by the programs it starts, off 2 MiB pages and
 * out of khugepaged's reach (PR_SET_THP_DISABLE with
 * PR_THP_DISABLE_EXCEPT_ADVISED: inherited across fork, kept across
 * execve; mappings that ask for 2 MiB pages still get them, the others
 * go without, anonymous ones too, as under THP "madvise"). *kept is
 * false, and nothing changed, on a kernel without that mode (before Linux
 * 6.18); a process whose huge pages are off already is left as it is. */
int store_keep_small_pages_inherited(bool *kept, tetris_error *err);
bool store_has_tensor(store *s, const tensor_digest *d);
/* Whether tensors/ has a regular file named d: one fstatat, no open and
 * no trailer read. Enough where the first invariant above is what vouches
 * for a file's bytes (a registration asking which tensors it must
 * publish); store_has_tensor also opens it and checks its trailer. */
bool store_tensor_present(store *s, const tensor_digest *d);

/* ---- publishing (ingest) ---- */

/* Writes exactly len bytes of the tensor into dst: a writable shared
 * mapping of the (not yet visible) temp file, so no intermediate copy. */
typedef int (*store_fill_fn)(void *ctx, void *dst, uint64_t len, tetris_error *err);

/* Publishes one tensor atomically: under the tensor's lock, if it is not
 * already resident, fills a temp file (0444, unnamed where the store has
 * no capacity and the system allows it: publish.c), re-hashes it and
 * compares digest and crc32 with meta, appends the trailer and puts it in
 * place under tensors/. *published (may be NULL) says whether this call created it.
 * TETRIS_E_CORRUPT if the filled bytes do not match meta; TETRIS_E_FULL if
 * capacity would be exceeded ("store full: need N bytes, M of C used") or
 * the filesystem is full; TETRIS_E_DENIED on a read-only store. Never
 * leaves a partial file under tensors/. */
int store_publish_tensor(store *s, const tensor_meta *meta, store_fill_fn fill, void *ctx,
                         bool *published, tetris_error *err);

/* Makes every lock stripe and fanout directory a publish could need: what
 * the node daemon does at start, so that the first loads on a node create
 * no files but their tensors'. A link or file in place of a fanout
 * directory fails it, naming the path. Idempotent; publishes make what is
 * missing anyway. */
int store_prepare_publish(store *s, tetris_error *err);

/* Copies bytes [offset, offset + len) of the tensor into dst. */
typedef int (*store_read_fn)(void *ctx, void *dst, uint64_t offset, size_t len, tetris_error *err);

/* As store_publish_tensor, but the bytes are asked for in chunks, hashed
 * while in cache and written with pwrite: the fast path for sources that can
 * be read at an offset (raw tensors in a model file, a client's fd). */
int store_publish_tensor_chunked(store *s, const tensor_meta *meta, store_read_fn read,
                                 void *ctx, bool *published, tetris_error *err);

/* Flags of store_publish_tensor_computed. */
enum {
    /* The file on 4 KiB pages, even on a tmpfs mounted huge=: for a
     * derived form's pre-packed weights, which BERT-base read 14-35%
     * slower than stock ONNX Runtime from physically contiguous 2 MiB
     * pages (1 and 2 threads), and as fast from 4 KiB ones (BENCHMARKS.md,
     * "Derived forms on 2 MiB store pages"). Needs a read source. */
    STORE_PUBLISH_SMALL_PAGES = 1u << 0,
};

/* Publishes a tensor whose identity is not known yet, reading its bytes
 * once: they are written into a temp file (reserved against the capacity
 * like any publish) and hashed on the way, which fills meta->digest and
 * meta->crc32; then, under that digest's lock, the file is put in place in
 * tensors/ unless the digest is resident already (then it is discarded and
 * *published is false). The store computes the name, so the invariant
 * that a file's bytes hash to its name holds whoever supplies the bytes.
 * Exactly one of read (chunks, as store_publish_tensor_chunked) and fill
 * (whole, as store_publish_tensor) is given; flags: STORE_PUBLISH_*, 0 for
 * none. Errors as store_publish_tensor (no TETRIS_E_CORRUPT: there is no
 * claim to contradict). */
int store_publish_tensor_computed(store *s, tensor_meta *meta, store_read_fn read,
                                  store_fill_fn fill, void *ctx, unsigned flags, bool *published,
                                  tetris_error *err);

/* What a file of file_bytes really costs the filesystem, and so what the
 * capacity is charged for it: its size rounded up to whole pages (tmpfs
 * allocates pages) plus STORE_INODE_CHARGE for its inode and dentry. An
 * empty tensor is not free: a pod could otherwise fill the node's kernel
 * memory with inodes without ever reaching the capacity. */
#define STORE_INODE_CHARGE 1024u
uint64_t store_charged_bytes(uint64_t file_bytes);
/* The charge of a resident tensor of nbytes (its file adds a trailer). */
uint64_t store_tensor_charge(uint64_t nbytes);

/* Bytes the store's resident tensors are charged (store_charged_bytes of
 * each file under tensors/; cached per fanout directory, revalidated by its
 * mtime). The capacity check adds the charges of live in-progress ingests
 * in tmp/. */
int store_usage_bytes(store *s, uint64_t *out, tetris_error *err);

/* ---- use lock: loaders shared, reclaimer exclusive ----
 * Writers wrap "record references, then map" in use_begin/use_end (which
 * nest, per handle); a reclaim pass reads holders and removes tensors
 * between reclaim_begin/reclaim_end. The lock is an flock on the handle's
 * own open file description, so one handle cannot be both: a process that
 * loads and reclaims opens the store twice. On a read-only handle
 * use_begin takes nothing (the daemon holds the references). A wait past
 * STORE_LOCK_TIMEOUT_MS fails TETRIS_E_TIMEOUT. */
int store_use_begin(store *s, tetris_error *err);
void store_use_end(store *s);
int store_reclaim_begin(store *s, tetris_error *err);
void store_reclaim_end(store *s);

/* ---- holders: who maps what, surviving crashes ---- */

typedef struct store_holder store_holder;

/* Creates holders/<id>.ref and keeps it flock-ed until store_holder_close
 * or process death. The lock belongs to the open file description: a forked
 * child that inherits it keeps the holder alive until it exits too (the fd
 * is close-on-exec). TETRIS_E_DENIED on a read-only store. label is free text (model name) recorded in the file.
 * owner_pid is the process the references belong to (getpid() normally; the
 * node daemon passes the client's pid when it records for an agent). */
int store_holder_open(store *s, const char *label, pid_t owner_pid, store_holder **out,
                      tetris_error *err);
/* Records a reference; durable (written to the file) before it returns. */
int store_holder_add(store_holder *h, const tensor_digest *d, uint64_t nbytes, tetris_error *err);
int store_holder_add_many(store_holder *h, const tensor_digest *d, const uint64_t *nbytes,
                          size_t n, tetris_error *err);
const char *store_holder_id(const store_holder *h);
/* Removes the holder file: its references are released. */
void store_holder_close(store_holder *h);

struct store_holder_info {
    const char *id; /* a kept holder: its name */
    const char *label;
    pid_t pid;  /* 0 for a kept holder */
    bool alive; /* its flock is still held; a kept holder is always alive */
    bool kept;
    size_t n_refs;
    const tensor_digest *refs;
    const uint64_t *ref_bytes;
    size_t n_garbage; /* lines that could not be parsed (skipped) */
};
/* Calls cb for every holder file. Liveness is probed by trying the file's
 * flock from a fresh open file description, so a process sees its own open
 * holders as alive (only a dup of the holder's fd would wrongly get the
 * lock). Garbage lines are skipped and counted, never fatal. Stops early and
 * returns cb's value if cb returns non-zero; 0 otherwise. */
int store_foreach_holder(store *s, int (*cb)(void *ctx, const struct store_holder_info *h),
                         void *ctx, tetris_error *err);

/* ---- kept holders: references that outlive the process that took them ----
 * For what holds tensors on behalf of something that is not a process: a
 * CSI volume (tetris-csi) holds its model's tensors from publish to
 * unpublish, across restarts of the plugin and of the daemon. A kept
 * holder is holders/<name>.keep; store_foreach_holder reports it alive
 * (so the reclaimer keeps its tensors), repair leaves it alone, and only
 * store_kept_release ends it. Whoever takes one must release it: a name
 * that encodes what it is for (the volume) lets a restarted owner find
 * its own. The caller already holds the references (a load's holder)
 * while it takes a kept one, so nothing is freed in between. */

#define STORE_KEPT_NAME_MAX 100
/* Writes holders/<name>.keep with the n references at once (a temp file,
 * then rename without replacing). name: [a-z0-9._-], 1 to
 * STORE_KEPT_NAME_MAX bytes, not starting with '.'. TETRIS_E_INVAL for a
 * bad name, TETRIS_E_CONFLICT if it exists, TETRIS_E_DENIED on a
 * read-only store. */
int store_kept_hold(store *s, const char *name, const char *label, const tensor_digest *d,
                    const uint64_t *nbytes, size_t n, tetris_error *err);
/* Removes holders/<name>.keep: its references are released. 0 when it
 * did not exist. */
int store_kept_release(store *s, const char *name, tetris_error *err);
/* Whether holders/<name>.keep exists (0 no, 1 yes, or a negative error). */
int store_kept_exists(store *s, const char *name, tetris_error *err);

/* ---- listing, removal, repair, verification ---- */

struct store_entry {
    tensor_meta meta; /* from the trailer */
    uint64_t file_bytes;
    struct timespec mtime; /* publish time */
};
/* Calls cb for every complete tensor (trailer consistent with file size and
 * name); anything else under tensors/ is skipped (store_repair removes it).
 * Stops early and returns cb's value if cb returns non-zero. */
int store_foreach_tensor(store *s, int (*cb)(void *ctx, const struct store_entry *e), void *ctx,
                         tetris_error *err);

/* Unlinks a resident tensor under its lock. Existing mappings keep working.
 * Callers that must not remove referenced tensors hold the reclaim lock. */
int store_remove_tensor(store *s, const tensor_digest *d, tetris_error *err);

/* Moves a tensor to quarantine/: no new mappings, existing ones keep working. */
int store_quarantine_tensor(store *s, const tensor_digest *d, tetris_error *err);
/* Unlinks every file in quarantine/ (mappings of them keep working); the
 * node daemon does it at start, when nothing it quarantined is worth
 * keeping for a look any more. */
int store_clear_quarantine(store *s, size_t *removed, tetris_error *err);

struct store_repair_report {
    size_t dead_holders_released;
    size_t temp_files_removed;
    size_t bad_tensors_removed; /* wrong size/trailer: half-finished renames */
};
/* Releases dead holders' references, removes orphaned temp files (whose
 * writer is gone) and any tensors/ file whose trailer is inconsistent. The
 * last part reads every tensor file's trailer: seconds with 100k tensors. */
int store_repair(store *s, struct store_repair_report *report, tetris_error *err);
/* Only the cheap part of store_repair: dead holders and dead writers' temp
 * files (holders/ and tmp/), without touching tensors/, so its cost does
 * not grow with the number of tensors. bad_tensors_removed stays 0. The
 * node daemon runs it every pass and the full repair more rarely: what
 * only the full walk finds (inconsistent files under tensors/) is damage
 * from outside the store's API, which atomic publishing never leaves. */
int store_repair_light(store *s, struct store_repair_report *report, tetris_error *err);

/* Re-hashes one resident tensor: 0 if it matches, TETRIS_E_CORRUPT if not. */
int store_verify_tensor(store *s, const tensor_digest *d, tetris_error *err);
/* Re-checks only the crc32 (cheap scrub). */
int store_check_crc(store *s, const tensor_digest *d, tetris_error *err);

#endif
