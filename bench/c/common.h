/* Helpers shared by the scale benchmarks (qp_scale.c, qp_pairs.c): open a
 * verbs device by name, read the clock and this process's memory. Plain
 * libibverbs, so the programs run on any provider; make bench runs them on
 * softverbs0 under `softverbs run`. */
#ifndef SOFTVERBS_BENCH_COMMON_H
#define SOFTVERBS_BENCH_COMMON_H

#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DIE(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A line "Key:   N kB" of /proc/self/status, in KiB: VmRSS is the resident
 * set now, VmHWM its peak. */
static long status_kib(const char *key)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;
	size_t n = strlen(key);
	if (!f)
		return -1;
	while (fgets(line, sizeof line, f))
		if (!strncmp(line, key, n) && line[n] == ':') {
			v = strtol(line + n + 1, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

static struct ibv_context *open_device(const char *name)
{
	int n, i;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *ctx = NULL;
	if (!list)
		DIE("ibv_get_device_list failed");
	for (i = 0; i < n && !ctx; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!ctx)
		DIE("cannot open device %s", name);
	return ctx;
}

#endif
