/* no_huge_tmpfs.c - a test-only LD_PRELOAD library that plays a kernel
 * without transparent huge pages for tmpfs, for the one call that tells:
 * mount(2) of a tmpfs with a huge= option fails EINVAL, as such a kernel
 * answers. Every other mount goes to the real one (and so really mounts). */
#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include <sys/mount.h>

typedef int (*mount_fn)(const char *, const char *, const char *, unsigned long, const void *);

int mount(const char *source, const char *target, const char *fstype, unsigned long flags,
          const void *data)
{
    if (fstype != NULL && strcmp(fstype, "tmpfs") == 0 && data != NULL &&
        strstr(data, "huge=") != NULL) {
        errno = EINVAL;
        return -1;
    }
    mount_fn real = (mount_fn)dlsym(RTLD_NEXT, "mount");
    if (real == NULL) {
        errno = ENOSYS;
        return -1;
    }
    return real(source, target, fstype, flags, data);
}
