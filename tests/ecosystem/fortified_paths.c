/* The device view through the entry points a fortified build
 * (-D_FORTIFY_SOURCE=2: __realpath_chk, __readlink_chk) and a program
 * built against glibc before 2.33 (__xstat, looked up as such a program's
 * reference would bind) reach. Prints "fortified paths ok". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int main(void) {
  char real[PATH_MAX], link[PATH_MAX];
  if (!realpath("/sys/class/infiniband/softverbs0", real) || !strstr(real, "/view-")) {
    fprintf(stderr, "realpath: %s\n", real);
    return 1;
  }
  /* A length the compiler cannot see makes the fortified call. */
  volatile size_t room = sizeof link - 1;
  ssize_t n = readlink("/sys/class/infiniband/softverbs0/device/net/lo", link, room);
  if (n < 0 || (link[n] = 0, strcmp(link, "/sys/class/net/lo"))) {
    fprintf(stderr, "readlink: %zd\n", n);
    return 1;
  }
  int (*xstat)(int, const char *, struct stat *) = dlsym(RTLD_DEFAULT, "__xstat");
  struct stat st;
  if (!xstat || xstat(1, "/sys/class/infiniband/softverbs0/ports/1/state", &st) || !S_ISREG(st.st_mode)) {
    fprintf(stderr, "__xstat\n");
    return 1;
  }
  printf("fortified paths ok\n");
  return 0;
}
