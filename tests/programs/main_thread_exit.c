/* A program whose main thread ends with pthread_exit while other threads
 * work on ends, with status 0, when its last thread ends: glibc then calls
 * exit(0). A kernel provider starts no thread; softverbs' own (each
 * context's progress thread, the rdma_cm service's) must not keep the
 * process alive after the application's threads have all ended (before
 * 2026-12-07 it never ended), nor end it while one still runs.
 *
 * Usage: main_thread_exit MODE, MODE one of:
 *   plain    a worker polls a CQ for a while, then sleeps with no verb for
 *            longer than softverbs waits between its looks;
 *   cm       the same with an rdma_cm channel and id open (the rdma_cm
 *            service's thread runs too); needs -DWITH_RDMA_CM -lrdmacm;
 *   relay    for 3 s each worker starts the next and ends at once, so at
 *            most moments one thread of the application runs, and never
 *            the one that started it;
 *   handlers 4 contexts; the exit handler moves data through an RC QP
 *            connected to itself on each (its verbs must complete: the
 *            progress threads still run) and closes them all;
 *   signal   2 contexts; the worker signals the process, whose handler
 *            must run on the worker (softverbs' threads block the
 *            application's signals) and to its end before the process
 *            ends (run on a progress thread, it was cut short when the
 *            worker ended).
 * The exit handler prints "main thread exit ok" once the workers finished
 * (and the handler's verbs succeeded). */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>
#ifdef WITH_RDMA_CM
#include <rdma/rdma_cma.h>
#endif
#include "test_util.h"

#define CONTEXTS 4

static atomic_int workers_done;
static atomic_int handler_failed;
static atomic_int signal_handled;
static atomic_int signal_on_softverbs;
static struct ibv_context *ctx[CONTEXTS];
static struct ibv_cq *cq[CONTEXTS];
static int contexts = 1;
static int signal_mode;
static double relay_until;
static pthread_t main_thread;

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
		CHECK(ibv_poll_cq(cq[0], 1, &wc) == 0, "a completion from nowhere");
	/* No verb for 2.5 s: softverbs looks within it, and must find this
	 * thread alive. */
	struct timespec pause = { .tv_sec = 2, .tv_nsec = 500000000 };
	nanosleep(&pause, NULL);
	atomic_store(&workers_done, 1);
	return NULL;
}

/* The application's handler: long enough that the worker ends first
 * if it runs elsewhere. */
static void on_signal(int sig)
{
	(void)sig;
	char name[16] = "";
	pthread_getname_np(pthread_self(), name, sizeof(name));
	if (!strncmp(name, "softverbs", 9))
		atomic_store(&signal_on_softverbs, 1);
	struct timespec pause = { .tv_sec = 1, .tv_nsec = 500000000 };
	nanosleep(&pause, NULL);
	atomic_store(&signal_handled, 1);
}

/* Signals the process once the main thread has ended, and ends. (Sent
 * while the main thread was still ending, the kernel could pick it, and
 * once it had ended hand the signal on to no thread, the worker having
 * ended meanwhile: the process's last thread then takes it, which with
 * softverbs is its thread that calls exit. So the main thread is waited
 * for, and the worker, the only thread of the application left, must
 * take it.) */
static void *signaller(void *arg)
{
	(void)arg;
	CHECK(!pthread_join(main_thread, NULL), "pthread_join of the main thread");
	CHECK(!kill(getpid(), SIGUSR1), "kill");
	atomic_store(&workers_done, 1);
	return NULL;
}

/* Starts the next runner and ends, until the relay's time is up. */
static void *runner(void *arg)
{
	(void)arg;
	if (seconds() >= relay_until) {
		atomic_store(&workers_done, 1);
		return NULL;
	}
	/* A breath between threads keeps the churn to some thousands. */
	struct timespec breath = { .tv_nsec = 100000 };
	nanosleep(&breath, NULL);
	pthread_t next;
	pthread_attr_t detached;
	pthread_attr_init(&detached);
	pthread_attr_setdetachstate(&detached, PTHREAD_CREATE_DETACHED);
	CHECK(!pthread_create(&next, &detached, runner, NULL), "pthread_create");
	return NULL;
}

/* An RDMA WRITE of 64 bytes through an RC QP connected to itself on
 * context `i`, waited for; false if anything failed. */
static int write_through_itself(int i)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx[i]);
	static char buf[CONTEXTS][128];
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf[i], 128, IBV_ACCESS_LOCAL_WRITE |
					 IBV_ACCESS_REMOTE_WRITE) : NULL;
	struct ibv_qp_init_attr qa = { .send_cq = cq[i], .recv_cq = cq[i], .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 1, .max_recv_wr = 1,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *qp = mr ? ibv_create_qp(pd, &qa) : NULL;
	if (!qp)
		return 0;
	union ibv_gid gid;
	if (ibv_query_gid(ctx[i], 1, 0, &gid))
		return 0;
	connect_rc(qp, qp->qp_num, gid, 0, IBV_ACCESS_REMOTE_WRITE);
	memset(buf[i], 'w', 64);
	struct ibv_sge s = { (uintptr_t)buf[i], 64, mr->lkey };
	struct ibv_send_wr w = { .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED }, *bad;
	w.wr.rdma.remote_addr = (uintptr_t)buf[i] + 64;
	w.wr.rdma.rkey = mr->rkey;
	if (ibv_post_send(qp, &w, &bad))
		return 0;
	struct ibv_wc wc;
	int n;
	double until = seconds() + 10;
	while ((n = ibv_poll_cq(cq[i], 1, &wc)) == 0 && seconds() < until)
		;
	int ok = n == 1 && wc.status == IBV_WC_SUCCESS && !memcmp(buf[i], buf[i] + 64, 64);
	ibv_destroy_qp(qp);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	return ok;
}

static void at_exit(void)
{
	for (int i = 0; i < contexts; i++) {
		if (contexts == CONTEXTS && !write_through_itself(i))
			atomic_store(&handler_failed, 1);
		ibv_destroy_cq(cq[i]);
		ibv_close_device(ctx[i]);
	}
	if (!atomic_load(&workers_done))
		printf("the process ended before its workers\n");
	else if (signal_mode && !atomic_load(&signal_handled))
		printf("the process ended in a signal handler\n");
	else if (atomic_load(&signal_on_softverbs))
		printf("the signal handler ran on a thread of softverbs'\n");
	else if (atomic_load(&handler_failed))
		printf("a verb of the exit handler failed\n");
	else
		printf("main thread exit ok\n");
	fflush(stdout);
}

static void open_cm(void)
{
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

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "plain";
	if (!strcmp(mode, "handlers"))
		contexts = CONTEXTS;
	signal_mode = !strcmp(mode, "signal");
	if (signal_mode) {
		contexts = 2;
		struct sigaction sa = { .sa_handler = on_signal };
		CHECK(!sigaction(SIGUSR1, &sa, NULL), "sigaction");
	}
	for (int i = 0; i < contexts; i++) {
		ctx[i] = open_device_named("softverbs0");
		CHECK(ctx[i], "ibv_open_device failed");
		cq[i] = ibv_create_cq(ctx[i], 16, NULL, NULL, 0);
		CHECK(cq[i], "ibv_create_cq failed");
	}
	if (!strcmp(mode, "cm"))
		open_cm();
	CHECK(!atexit(at_exit), "atexit failed");
	main_thread = pthread_self();
	pthread_t t;
	if (!strcmp(mode, "relay")) {
		relay_until = seconds() + 3;
		CHECK(!pthread_create(&t, NULL, runner, NULL), "pthread_create failed");
	} else if (signal_mode) {
		CHECK(!pthread_create(&t, NULL, signaller, NULL), "pthread_create failed");
	} else {
		CHECK(!pthread_create(&t, NULL, worker, NULL), "pthread_create failed");
	}
	pthread_exit(NULL);
}
