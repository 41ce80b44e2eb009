/* test_gpu.c - tensorstore/gpu against the fake driver (tests/gpu/
 * fake_libcuda.c, $TETRIS_BUILD/fakecuda/libcuda.so.1): loading and its
 * errors, device names, padding, create/fill/export/import/map, read-only
 * access (a copy into it fails, a store into it kills only the writer),
 * copies counted by cuMemGetInfo, and injected out-of-memory. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tensorstore/gpu/gpu.h"
#include "tests/lib/unit.h"

static char fake_path[4096];

static void find_fake(void)
{
    const char *b = getenv("TETRIS_BUILD");
    snprintf(fake_path, sizeof(fake_path), "%s/fakecuda/libcuda.so.1",
             b != NULL ? b : "build/release");
    setenv("TETRIS_FAKE_CUDA_GRANULARITY", "65536", 1);
    /* Our own fake machine: other runs' allocations are not counted. */
    char id[32];
    snprintf(id, sizeof(id), "unit%d", (int)getpid());
    setenv("TETRIS_FAKE_CUDA_ID", id, 1);
}

static gpu_driver *open_fake(void)
{
    tetris_error err = {0};
    gpu_driver *g = NULL;
    ck_assert_msg(gpu_driver_open(fake_path, &g, &err) == 0, "%s", err.msg);
    return g;
}

START_TEST(test_missing_driver)
{
    tetris_error err = {0};
    gpu_driver *g = NULL;
    ck_assert_int_eq(gpu_driver_open("/nonexistent/libcuda.so.1", &g, &err), -TETRIS_E_UNAVAILABLE);
    ck_assert_ptr_nonnull(strstr(err.msg, "libcuda.so.1 not found: GPU sharing unavailable"));
    /* The default name, with no driver installed (the test machines have
     * none; where one is, it must load). */
    unsetenv(GPU_LIBCUDA_ENV);
    int rc = gpu_driver_open(NULL, &g, &err);
    if (rc == 0)
        gpu_driver_close(g);
    else
        ck_assert_ptr_nonnull(strstr(err.msg, "GPU sharing unavailable"));
    /* A library that is not a driver. */
    ck_assert_int_eq(gpu_driver_open("libc.so.6", &g, &err), -TETRIS_E_UNAVAILABLE);
    ck_assert_ptr_nonnull(strstr(err.msg, "lacks cuInit"));
}
END_TEST

START_TEST(test_device_names)
{
    tetris_error err = {0};
    int n = -1;
    ck_assert_int_eq(gpu_device_parse("cuda:0", &n, &err), 0);
    ck_assert_int_eq(n, 0);
    ck_assert_int_eq(gpu_device_parse("cuda:15", &n, &err), 0);
    ck_assert_int_eq(n, 15);
    const char *bad[] = {"",        "cuda",    "cuda:", "cuda:-1", "cuda:16",
                         "cuda:01", "cuda:1x", "gpu:0", "CUDA:0",  "cuda: 1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(gpu_device_parse(bad[i], &n, &err) == -TETRIS_E_INVAL, "%s", bad[i]);
    ck_assert_int_eq(gpu_device_parse(NULL, &n, &err), -TETRIS_E_INVAL);
    gpu_driver *g = open_fake();
    ck_assert_int_eq(gpu_device_check(g, 0, &err), 0);
    ck_assert_int_eq(gpu_device_check(g, 1, &err), -TETRIS_E_NOTFOUND);
    ck_assert_int_eq(gpu_driver_version(g), 13000);
    char name[64];
    ck_assert_int_eq(gpu_device_name(g, 0, name, sizeof(name), &err), 0);
    ck_assert_str_eq(name, "tetris fake GPU 0");
    gpu_driver_close(g);
    setenv("TETRIS_FAKE_CUDA_NO_VMM", "1", 1);
    g = open_fake();
    ck_assert_int_eq(gpu_device_check(g, 0, &err), -TETRIS_E_UNAVAILABLE);
    ck_assert_ptr_nonnull(strstr(err.msg, "virtual memory management"));
    gpu_driver_close(g);
}
END_TEST

START_TEST(test_padding)
{
    tetris_error err = {0};
    gpu_driver *g = open_fake();
    uint64_t p;
    ck_assert_int_eq(gpu_padded_size(g, 0, 1, &p, &err), 0);
    ck_assert_uint_eq(p, 65536);
    ck_assert_int_eq(gpu_padded_size(g, 0, 0, &p, &err), 0);
    ck_assert_uint_eq(p, 65536);
    ck_assert_int_eq(gpu_padded_size(g, 0, 65536, &p, &err), 0);
    ck_assert_uint_eq(p, 65536);
    ck_assert_int_eq(gpu_padded_size(g, 0, 65537, &p, &err), 0);
    ck_assert_uint_eq(p, 131072);
    ck_assert_int_eq(gpu_padded_size(g, 0, UINT64_MAX, &p, &err), -TETRIS_E_INVAL);
    gpu_driver_close(g);
}
END_TEST

static uint64_t used(gpu_driver *g)
{
    tetris_error err = {0};
    uint64_t f, t;
    ck_assert_msg(gpu_mem_info(g, 0, &f, &t, &err) == 0, "%s", err.msg);
    return t - f;
}

START_TEST(test_share_read_only)
{
    tetris_error err = {0};
    gpu_driver *g = open_fake();
    uint64_t base = used(g);
    char data[100000];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (char)(i * 7);
    gpu_alloc a;
    ck_assert_msg(gpu_alloc_create(g, 0, sizeof(data), &a, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(a.size, 131072);
    ck_assert_msg(gpu_alloc_fill(g, &a, data, sizeof(data), &err) == 0, "%s", err.msg);
    ck_assert_int_eq(gpu_alloc_fill(g, &a, data, a.size + 1, &err), -TETRIS_E_INVAL);
    int fd;
    ck_assert_msg(gpu_alloc_export(g, &a, &fd, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(used(g) - base, a.size);
    /* Two importers, one copy. */
    gpu_mapping m1, m2;
    ck_assert_msg(gpu_import_map(g, 0, fd, a.size, false, &m1, &err) == 0, "%s", err.msg);
    ck_assert_msg(gpu_import_map(g, 0, fd, a.size, false, &m2, &err) == 0, "%s", err.msg);
    ck_assert_uint_eq(used(g) - base, a.size);
    char back[100000];
    ck_assert_int_eq(gpu_copy_to_host(g, 0, back, m1.ptr, sizeof(back), &err), 0);
    ck_assert_int_eq(memcmp(back, data, sizeof(data)), 0);
    /* Read-only: a copy into it is refused, a store kills the writer. */
    ck_assert_int_ne(gpu_copy_to_device(g, 0, m1.ptr, data, 16, &err), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL); /* not a sanitizer's report: the kernel's kill */
        ((volatile char *)(uintptr_t)m2.ptr)[0] = 1;
        _exit(0);
    }
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
    ck_assert_int_eq(gpu_copy_to_host(g, 0, back, m2.ptr, sizeof(back), &err), 0);
    ck_assert_int_eq(memcmp(back, data, sizeof(data)), 0);
    /* The exporter lets go; the importers keep the memory. */
    gpu_alloc_release(g, &a);
    close(fd);
    ck_assert_uint_eq(used(g) - base, 131072);
    gpu_unmap(g, &m1);
    ck_assert_uint_eq(used(g) - base, 131072);
    gpu_unmap(g, &m2);
    ck_assert_uint_eq(used(g), base);
    /* A size the exporter did not give is refused, a descriptor that is no
     * allocation too. */
    ck_assert_int_eq(gpu_alloc_create(g, 0, 10, &a, &err), 0);
    ck_assert_int_eq(gpu_alloc_export(g, &a, &fd, &err), 0);
    ck_assert_int_ne(gpu_import_map(g, 0, fd, 2 * a.size, false, &m1, &err), 0);
    ck_assert_int_ne(gpu_import_map(g, 0, fd, 100, false, &m1, &err), 0);
    ck_assert_int_ne(gpu_import_map(g, 0, 0, a.size, false, &m1, &err), 0);
    /* The trust limit: an importer may choose to write. */
    ck_assert_int_eq(gpu_import_map(g, 0, fd, a.size, true, &m1, &err), 0);
    ck_assert_int_eq(gpu_copy_to_device(g, 0, m1.ptr, data, 16, &err), 0);
    gpu_unmap(g, &m1);
    close(fd);
    gpu_alloc_release(g, &a);
    gpu_driver_close(g);
}
END_TEST

START_TEST(test_out_of_memory)
{
    tetris_error err = {0};
    setenv("TETRIS_FAKE_CUDA_FAIL_CREATE_AFTER", "1", 1);
    gpu_driver *g = open_fake();
    gpu_alloc a, b;
    ck_assert_int_eq(gpu_alloc_create(g, 0, 10, &a, &err), 0);
    ck_assert_int_eq(gpu_alloc_create(g, 0, 10, &b, &err), -TETRIS_E_FULL);
    ck_assert_ptr_nonnull(strstr(err.msg, "out of memory"));
    gpu_alloc_release(g, &a);
    unsetenv("TETRIS_FAKE_CUDA_FAIL_CREATE_AFTER");
    setenv("TETRIS_FAKE_CUDA_TOTAL", "65536", 1);
    ck_assert_int_eq(gpu_alloc_create(g, 0, 65537, &a, &err), -TETRIS_E_FULL);
    ck_assert_int_eq(gpu_alloc_create(g, 1, 10, &a, &err), -TETRIS_E_NOTFOUND);
    gpu_driver_close(g);
}
END_TEST

static void unit_tests(Suite *s)
{
    find_fake();
    TCase *tc = unit_tcase(s, "core", 60);
    tcase_add_test(tc, test_missing_driver);
    tcase_add_test(tc, test_device_names);
    tcase_add_test(tc, test_padding);
    tcase_add_test(tc, test_share_read_only);
    tcase_add_test(tc, test_out_of_memory);
}

UNIT_MAIN("gpu")
