/* What the C checks in tests/programs share: failing with a message, and
 * opening a device by name. Header-only: each check is one source file,
 * compiled with `cc FILE.c -libverbs` by the scripts that run it. */
#ifndef SOFTVERBS_TEST_UTIL_H
#define SOFTVERBS_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

/* Exits 1 with the message unless the condition holds. */
#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } } while (0)

/* Opens the device called `name`; exits 1 if it is not listed. */
static inline struct ibv_context *open_device_named(const char *name)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list, "no device list");
	for (int i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name)) {
			struct ibv_context *c = ibv_open_device(list[i]);
			ibv_free_device_list(list);
			return c;
		}
	CHECK(0, "%s not listed", name);
	return NULL;
}

#endif
