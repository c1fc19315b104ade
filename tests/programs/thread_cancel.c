/* pthread_cancel of threads using verbs, as programs stop their worker
 * threads (rping cancels its CQ thread):
 *
 * - a thread posting RDMA WRITEs to a peer process and spinning on
 *   ibv_poll_cq for each, with a cancellation point (pthread_testcancel)
 *   after each, is cancelled 20 times in a row: it ends each time, at its
 *   own cancellation point or one in a verb (a provider may have them:
 *   rxe's post is a write(2)), never with the process aborting (the
 *   system calls softverbs makes inside a verb once let glibc's forced
 *   unwind into its Rust code: "FATAL: exception not rethrown"). A WRITE
 *   a cancel in a verb left in flight completes in the next round's poll;
 * - a thread blocked in ibv_get_cq_event is cancelled and ends there;
 * - after all that the context, QP and CQ still work: one more WRITE
 *   completes (no lock was left held by a cancelled thread).
 *
 * The child process is the WRITEs' target. Prints "thread cancel ok". */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include "test_util.h"

static struct ibv_qp *qp;
static struct ibv_cq *cq;
static struct ibv_mr *mr;
static char *buf;
static struct end peer;
static atomic_long writes;

static void *write_loop(void *arg)
{
	(void)arg;
	for (;;) {
		one_wr(qp, cq, mr, buf, &peer, IBV_WR_RDMA_WRITE, "WRITE");
		atomic_fetch_add(&writes, 1);
		pthread_testcancel();
	}
	return NULL;
}

static atomic_int waiter_tid;

static void *event_wait(void *channel)
{
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	atomic_store(&waiter_tid, (int)syscall(SYS_gettid));
	ibv_get_cq_event(channel, &ev_cq, &ev_ctx);
	return NULL; /* reached only with an event: never here */
}

/* Whether thread `tid` of this process sleeps in the kernel. */
static int sleeping(int tid)
{
	char path[64], stat[256];
	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	size_t n = fread(stat, 1, sizeof(stat) - 1, f);
	fclose(f);
	stat[n] = 0;
	char *end = strrchr(stat, ')');
	return end && end[1] == ' ' && end[2] == 'S';
}

int main(void)
{
	struct link l;
	struct ibv_pd *pd;
	pid_t child = fork_linked(&l);
	cq = open_pd_cq(&pd);
	buf = aligned_alloc(4096, 4096);
	mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	qp = connect_linked(&l, pd, cq, mr, IBV_ACCESS_REMOTE_WRITE, &peer);
	if (child == 0) {
		char c;
		/* The target serves until the peer's end of the link closes. */
		return read(l.in, &c, 1) < 0;
	}
	for (int round = 0; round < 20; round++) {
		pthread_t t;
		void *result;
		long start = atomic_load(&writes);
		CHECK(!pthread_create(&t, NULL, write_loop, NULL), "pthread_create");
		/* Cancelled in the middle of its work: after 50 WRITEs. */
		while (atomic_load(&writes) < start + 50)
			;
		pthread_cancel(t);
		pthread_join(t, &result);
		CHECK(result == PTHREAD_CANCELED, "round %d: the writer was not cancelled", round);
	}

	struct ibv_comp_channel *channel = ibv_create_comp_channel(pd->context);
	CHECK(channel, "ibv_create_comp_channel");
	struct ibv_cq *quiet = ibv_create_cq(pd->context, 4, NULL, channel, 0);
	CHECK(quiet && !ibv_req_notify_cq(quiet, 0), "a CQ on the channel, armed");
	pthread_t t;
	void *result;
	CHECK(!pthread_create(&t, NULL, event_wait, channel), "pthread_create");
	/* Cancelled once blocked in the call (for at most 2 s). */
	struct timespec tick = {0, 1000 * 1000};
	for (int i = 0; i < 2000 && !(atomic_load(&waiter_tid) && sleeping(atomic_load(&waiter_tid))); i++)
		nanosleep(&tick, NULL);
	pthread_cancel(t);
	pthread_join(t, &result);
	CHECK(result == PTHREAD_CANCELED, "the thread in ibv_get_cq_event was not cancelled");

	one_wr(qp, cq, mr, buf, &peer, IBV_WR_RDMA_WRITE, "the WRITE after the cancels");
	CHECK(!ibv_destroy_cq(quiet) && !ibv_destroy_comp_channel(channel), "clean-up");
	printf("thread cancel ok: %ld WRITEs\n", atomic_load(&writes));
	close(l.out);
	int status;
	CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "the target");
	return 0;
}
