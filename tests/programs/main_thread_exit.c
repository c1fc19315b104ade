/* A program whose main thread ends with pthread_exit while another thread
 * works on: the process ends, with status 0, when that thread ends, as
 * glibc ends it once its last thread has ended. A kernel provider starts
 * no thread; softverbs' own (each context's progress thread, the rdma_cm
 * service's) must not keep the process alive after the application's
 * threads have all ended (before 2026-12-07 it never ended).
 *
 * The worker first polls a CQ for a while (verbs running), then sleeps
 * with no verb for longer than softverbs waits before it looks whether
 * the application has ended, so a look sees it alive: the process must
 * not end before the worker says it is done. Exit handlers run as at any
 * exit(0): this one closes the device. With "cm", an rdma_cm event
 * channel and id live too (the rdma_cm service's thread runs); build with
 * -DWITH_RDMA_CM and link with -lrdmacm then.
 *
 * Usage: main_thread_exit [cm]. Prints "main thread exit ok" at exit once
 * the worker has finished. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>
#ifdef WITH_RDMA_CM
#include <rdma/rdma_cma.h>
#endif
#include "test_util.h"

static atomic_int worker_done;
static struct ibv_context *ctx;
static struct ibv_cq *cq;

static double seconds(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void *worker(void *arg)
{
	(void)arg;
	struct ibv_wc wc;
	double until = seconds() + 0.5;
	while (seconds() < until)
		CHECK(ibv_poll_cq(cq, 1, &wc) == 0, "a completion from nowhere");
	/* No verb for 2.5 s: softverbs looks within it, and must find this
	 * thread alive. */
	struct timespec pause = { .tv_sec = 2, .tv_nsec = 500000000 };
	nanosleep(&pause, NULL);
	atomic_store(&worker_done, 1);
	return NULL;
}

/* Closes the device as a careful program's exit handler does: softverbs
 * may run it on its own thread, the one that ends the process. */
static void at_exit(void)
{
	CHECK(!ibv_destroy_cq(cq), "ibv_destroy_cq at exit failed");
	CHECK(!ibv_close_device(ctx), "ibv_close_device at exit failed");
	if (atomic_load(&worker_done))
		printf("main thread exit ok\n");
	else
		printf("the process ended before its worker thread\n");
	fflush(stdout);
}

int main(int argc, char **argv)
{
	ctx = open_device_named("softverbs0");
	CHECK(ctx, "ibv_open_device failed");
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(cq, "ibv_create_cq failed");
	if (argc > 1 && !strcmp(argv[1], "cm")) {
#ifdef WITH_RDMA_CM
		struct rdma_event_channel *ch = rdma_create_event_channel();
		CHECK(ch, "rdma_create_event_channel failed");
		struct rdma_cm_id *id;
		CHECK(!rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), "rdma_create_id failed");
		struct sockaddr_in sin = { .sin_family = AF_INET };
		sin.sin_addr.s_addr = htonl(0x7f000001);
		CHECK(!rdma_bind_addr(id, (struct sockaddr *)&sin), "rdma_bind_addr failed");
#else
		CHECK(0, "built without rdma_cm (-DWITH_RDMA_CM -lrdmacm)");
#endif
	}
	CHECK(!atexit(at_exit), "atexit failed");
	pthread_t t;
	CHECK(!pthread_create(&t, NULL, worker, NULL), "pthread_create failed");
	pthread_exit(NULL);
}
