/* A blocking rdma_get_cm_event that began before its channel's close,
 * woken by an event that arrives as the close runs: as at the kernel's
 * rdma_cm file, which the call holds until it returns, it returns that
 * event or waits for ever, never EBADF. rping's client met this (once in
 * a CI run, 2026-12-06): its event thread, blocked since ESTABLISHED,
 * woke for the DISCONNECTED event while the main thread closed the
 * channel, and in the moment between the service forgetting the channel
 * and the descriptor's close the command failed EBADF (rping exits 255).
 * Each round: an event thread makes one blocking call; once it waits in
 * it (its system call is recvfrom, read from /proc), the main thread
 * resolves an address (ADDR_RESOLVED, queued at once) and closes the
 * channel. A thread waiting for ever is cancelled (the wait is a
 * cancellation point, as the kernel's). Usage: cm_close_under_wait IP
 * [ROUNDS] (200). Prints "close under wait ok". */
#include <rdma/rdma_cma.h>
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define FAIL(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)

struct waiter {
	struct rdma_event_channel *ch;
	atomic_int tid;
	atomic_int result; /* 0 while waiting, 1 for an event, else -errno */
};

static void *wait_once(void *arg)
{
	struct waiter *w = arg;
	struct rdma_cm_event *ev;
	atomic_store(&w->tid, (int)syscall(SYS_gettid));
	int rc = rdma_get_cm_event(w->ch, &ev);
	int err = errno;
	/* Recorded before any cancellation point: a cancel cannot hide it. */
	atomic_store(&w->result, rc == 0 ? 1 : -err);
	return NULL;
}

/* Whether thread `tid` is in the system call `nr` now. */
static int in_syscall(int tid, long nr)
{
	char path[64], line[64] = "";
	snprintf(path, sizeof path, "/proc/self/task/%d/syscall", tid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	int got = fgets(line, sizeof line, f) != NULL;
	fclose(f);
	return got && strtol(line, NULL, 10) == nr;
}

/* Whether thread `tid` is in poll (or ppoll, where poll is made of it). */
static int in_poll(int tid)
{
#ifdef SYS_poll
	if (in_syscall(tid, SYS_poll))
		return 1;
#endif
	return in_syscall(tid, SYS_ppoll);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		FAIL("usage: cm_close_under_wait IP [ROUNDS]");
	int rounds = argc > 2 ? atoi(argv[2]) : 200;
	struct sockaddr_in dst = { .sin_family = AF_INET };
	if (inet_pton(AF_INET, argv[1], &dst.sin_addr) != 1)
		FAIL("bad address %s", argv[1]);
	int events = 0, forever = 0;
	for (int round = 0; round < rounds; round++) {
		struct waiter w = { .ch = rdma_create_event_channel() };
		struct rdma_cm_id *id;
		if (!w.ch || rdma_create_id(w.ch, &id, NULL, RDMA_PS_TCP))
			FAIL("setup: %s", strerror(errno));
		pthread_t t;
		pthread_create(&t, NULL, wait_once, &w);
		while (atomic_load(&w.tid) == 0 || !in_syscall(atomic_load(&w.tid), SYS_recvfrom))
			sched_yield();
		if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000))
			FAIL("rdma_resolve_addr: %s", strerror(errno));
		close(w.ch->fd); /* rdma_destroy_event_channel, but keeping ch */
		/* The call returns, or waits for ever in a poll of nothing. */
		while (atomic_load(&w.result) == 0 && !in_poll(atomic_load(&w.tid)))
			sched_yield();
		pthread_cancel(t);
		pthread_join(t, NULL);
		int result = atomic_load(&w.result);
		if (result < 0)
			FAIL("round %d: a blocking rdma_get_cm_event that began before the close: %s",
			     round, strerror(-result));
		events += result == 1;
		forever += result == 0;
		free(w.ch);
	}
	printf("close under wait ok (%d events, %d waits for ever)\n", events, forever);
	return 0;
}
