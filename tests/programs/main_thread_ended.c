/* A process whose main thread has ended with pthread_exit while another
 * thread goes on with verbs: it registers memory, opens an rdma_cm event
 * channel and id (built with -DWITH_RDMA_CM -lrdmacm), connects an RC QP
 * to a peer process and moves data both ways, the peer's WRITE and READ
 * reaching into its memory too. As with a kernel provider, all of it
 * works: the main thread's end changes nothing for the others (before
 * 2026-12-07 softverbs named its own memory by the process's id, which
 * then names a zombie thread with no memory: ibv_reg_mr failed EFAULT,
 * rdma_create_event_channel failed, and a same-host peer could not reach
 * the process). The working thread ends the process with exit(0) itself
 * (main_thread_exit.c tests a process that ends with its last thread).
 *
 * The target is a forked child; the parent is its peer, and prints
 * "main thread ended ok" once both sides have checked every byte. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/wait.h>
#include "test_util.h"
#ifdef WITH_RDMA_CM
#include <rdma/rdma_cma.h>
#endif

#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

static struct link l;

/* Whether this process's main thread has ended: its /proc/self/stat
 * (the main thread's) reads Z while the others run on. */
static int main_thread_ended(void)
{
	char stat[512];
	FILE *f = fopen("/proc/self/stat", "r");
	CHECK(f && fgets(stat, sizeof(stat), f), "read /proc/self/stat");
	fclose(f);
	const char *close = strrchr(stat, ')');
	return close && close[1] == ' ' && close[2] == 'Z';
}

/* Waits for one byte from the other side of `l`. */
static void wait_for_peer(void)
{
	char b;
	CHECK(read(l.in, &b, 1) == 1, "the other side ended early");
}

static void tell_peer(void)
{
	CHECK(write(l.out, "", 1) == 1, "tell the other side");
}

static void cm_works(void)
{
#ifdef WITH_RDMA_CM
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch, "rdma_create_event_channel after the main thread ended: %s", strerror(errno));
	struct rdma_cm_id *id;
	CHECK(!rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), "rdma_create_id: %s", strerror(errno));
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001) };
	CHECK(!rdma_bind_addr(id, (struct sockaddr *)&sin), "rdma_bind_addr: %s", strerror(errno));
	CHECK(!rdma_destroy_id(id), "rdma_destroy_id");
	rdma_destroy_event_channel(ch);
#endif
}

/* The target's working thread: everything after the main thread ended. */
static void *target(void *arg)
{
	(void)arg;
	while (!main_thread_ended())
		sched_yield();
	struct ibv_pd *pd;
	struct ibv_cq *cq = open_pd_cq(&pd);
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, ACCESS);
	CHECK(mr, "ibv_reg_mr after the main thread ended: %s", strerror(errno));
	cm_works();
	struct end peer;
	struct ibv_qp *qp = connect_linked(&l, pd, cq, mr, ACCESS, &peer);
	/* The peer's first 64 bytes read 'p': READ them, then WRITE 't's. */
	one_wr(qp, cq, mr, buf + 64, &peer, IBV_WR_RDMA_READ, "the target's READ");
	for (int i = 0; i < 64; i++)
		CHECK(buf[64 + i] == 'p', "the target's READ brought byte %d: %d", i, buf[64 + i]);
	memset(buf, 't', 64);
	one_wr(qp, cq, mr, buf, &peer, IBV_WR_RDMA_WRITE, "the target's WRITE");
	tell_peer();
	/* The peer WRITEs 'q's over our first 64 bytes and READs them back. */
	wait_for_peer();
	for (int i = 0; i < 64; i++)
		CHECK(buf[i] == 'q', "the peer's WRITE left byte %d: %d", i, buf[i]);
	exit(0);
}

static void peer(pid_t child)
{
	struct ibv_pd *pd;
	struct ibv_cq *cq = open_pd_cq(&pd);
	char *buf = calloc(1, 4096);
	memset(buf, 'p', 64);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, ACCESS);
	struct end target_end;
	struct ibv_qp *qp = connect_linked(&l, pd, cq, mr, ACCESS, &target_end);
	wait_for_peer();
	for (int i = 0; i < 64; i++)
		CHECK(buf[i] == 't', "the target's WRITE left byte %d: %d", i, buf[i]);
	memset(buf + 64, 'q', 64);
	one_wr(qp, cq, mr, buf + 64, &target_end, IBV_WR_RDMA_WRITE, "the peer's WRITE");
	one_wr(qp, cq, mr, buf + 128, &target_end, IBV_WR_RDMA_READ, "the peer's READ");
	for (int i = 0; i < 64; i++)
		CHECK(buf[128 + i] == 'q', "the peer's READ brought byte %d: %d", i, buf[128 + i]);
	tell_peer();
	int status;
	CHECK(waitpid(child, &status, 0) == child, "waitpid");
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the target failed (status %#x)", status);
	printf("main thread ended ok\n");
}

int main(void)
{
	pid_t child = fork_linked(&l);
	if (child) {
		peer(child);
		return 0;
	}
	pthread_t t;
	CHECK(!pthread_create(&t, NULL, target, NULL), "pthread_create");
	pthread_exit(NULL);
}
