/* Application mistakes a kernel provider turns into an errno or an error
 * completion, checked through the provider as a program meets them; each
 * once crashed the process (or returned the wrong errno):
 *  - ibv_reg_mr of NULL, of unmapped memory, of length 0, of a read-only
 *    mapping with write access, of the kernel's [vvar] page, and of a
 *    file's mapping past the file's end: EFAULT, EFAULT, EINVAL, EFAULT,
 *    EFAULT, EFAULT (the file's own pages register); of a mapping made with PROT_WRITE
 *    alone, with write access: accepted, as the kernel's pinning does, and
 *    a peer WRITE lands there; ibv_reg_mr_iova with an iova at another
 *    offset within its page than the address: EINVAL, as the kernel's
 *    ib_uverbs_reg_mr;
 *  - an MR whose buffer is unmapped while still registered: a peer RDMA
 *    WRITE, READ or atomic there completes with IBV_WC_REM_ACCESS_ERR and
 *    a SEND from it with IBV_WC_LOC_PROT_ERR, and the process lives on;
 *  - ibv_post_send with num_sge = 0x7fffffff, an inline WR of 1 GiB, and
 *    ibv_post_recv with num_sge = 0x7fffffff: EINVAL with bad_wr set;
 *    a post with a NULL bad_wr: EINVAL (rxe's answer);
 *  - a failing ibv_modify_qp sets errno to the value it returns;
 *  - an AH whose flow label is wider than 20 bits (UCX passes ~0);
 *  - the context's cmd_fd is a real descriptor;
 *  - a child made by fork closes its copy of the context (a cleanup
 *    path shared with the parent): 0, nothing printed (a Rust panic was),
 *    and the parent's context works on;
 *  - a child made by fork that calls verbs on the context it inherited
 *    gets EIO (its polls took the parent's packets from the parent's
 *    socket, whose connections then ended in RETRY_EXC_ERR);
 *  - a SEND longer than its receive WR, on a QP connected to itself: the
 *    receive WR completes with IBV_WC_LOC_LEN_ERR;
 *  - ibv_close_device with a PD, CQ, QP and MR alive, a thread polling the
 *    CQ meanwhile: verbs on them afterwards fail (EIO), where they crashed;
 *    and forked children closing their copy while a parent thread polls:
 *    each close returns.
 * Prints "app mistakes ok".
 *
 * With the argument "late-fault-handler" (preload mode; see
 * docs/conformance.md for plugin mode), a crash reporter installed after the
 * device was opened, whose SIGSEGV and SIGBUS handler reports and exits,
 * and MRs made PROT_NONE under it: a peer WRITE into one completes with
 * IBV_WC_REM_ACCESS_ERR, a WRITE from one with IBV_WC_LOC_PROT_ERR, and
 * the reporter never runs (it once did, and the process died). Prints
 * "late fault handler ok". */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "test_util.h"

#define PAGE 4096
#define ALL_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static union ibv_gid gid;

static void *map(int prot)
{
	void *p = mmap(NULL, PAGE, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(p != MAP_FAILED, "mmap");
	return p;
}

static void expect_reg_fails(void *addr, size_t len, int access, int err, const char *what)
{
	errno = 0;
	struct ibv_mr *mr = ibv_reg_mr(pd, addr, len, access);
	CHECK(!mr && errno == err, "reg_mr of %s: got %p errno %d, want NULL and %d", what, (void *)mr, errno, err);
}

static struct ibv_qp *new_qp(void)
{
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 2, .max_recv_sge = 2,
			 .max_inline_data = 64 },
		.qp_type = IBV_QPT_RC };
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	CHECK(qp, "create_qp");
	return qp;
}

/* Waits for the completion of wr_id and returns its status. */
static enum ibv_wc_status completion_of(uint64_t wr_id)
{
	for (long spins = 0; spins < 200000000L; spins++) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n >= 0, "poll_cq");
		if (n && wc.wr_id == wr_id)
			return wc.status;
	}
	CHECK(0, "no completion for wr_id %llu", (unsigned long long)wr_id);
	return IBV_WC_GENERAL_ERR;
}

/* Posts one WR of `opcode` from `local` to `remote` (rkey) over a fresh
 * connected pair of QPs and returns the requester's completion status. */
static enum ibv_wc_status one_op(enum ibv_wr_opcode opcode, struct ibv_mr *local, struct ibv_mr *remote)
{
	static uint64_t next_id = 100;
	struct ibv_qp *a = new_qp(), *b = new_qp();
	connect_rc(a, b->qp_num, gid, 0, ALL_ACCESS);
	connect_rc(b, a->qp_num, gid, 0, ALL_ACCESS);
	uint64_t id = next_id++;
	struct ibv_sge sge = { (uintptr_t)local->addr, opcode >= IBV_WR_ATOMIC_CMP_AND_SWP ? 8 : 64, local->lkey };
	struct ibv_send_wr w = { .wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = opcode,
				 .send_flags = IBV_SEND_SIGNALED }, *bad;
	if (opcode >= IBV_WR_ATOMIC_CMP_AND_SWP) {
		w.wr.atomic.remote_addr = (uintptr_t)remote->addr;
		w.wr.atomic.rkey = remote->rkey;
	} else {
		w.wr.rdma.remote_addr = (uintptr_t)remote->addr;
		w.wr.rdma.rkey = remote->rkey;
	}
	CHECK(!ibv_post_send(a, &w, &bad), "post_send");
	enum ibv_wc_status st = completion_of(id);
	/* Drain the flushed receive side, then tear the pair down. */
	struct ibv_wc wc;
	while (ibv_poll_cq(cq, 1, &wc) > 0)
		;
	CHECK(!ibv_destroy_qp(a) && !ibv_destroy_qp(b), "destroy_qp");
	return st;
}

/* A SEND longer than the receive WR it lands in, on a QP connected to
 * itself: the receive WR completes with IBV_WC_LOC_LEN_ERR, as between
 * two QPs and on the wire (on the same-host path it was flushed: the NAK
 * failed the QP before the receive's error was applied). */
static void a_send_longer_than_its_receive(void)
{
	static char buf[PAGE];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, PAGE, ALL_ACCESS);
	struct ibv_qp *qp = new_qp();
	CHECK(mr, "reg_mr");
	connect_rc(qp, qp->qp_num, gid, 0, ALL_ACCESS);
	struct ibv_sge small = { (uintptr_t)buf, 4, mr->lkey }, big = { (uintptr_t)buf + 64, 64, mr->lkey };
	struct ibv_recv_wr r = { .wr_id = 42, .sg_list = &small, .num_sge = 1 }, *bad_r;
	struct ibv_send_wr w = { .wr_id = 41, .sg_list = &big, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED }, *bad;
	CHECK(!ibv_post_recv(qp, &r, &bad_r) && !ibv_post_send(qp, &w, &bad), "post");
	enum ibv_wc_status st = completion_of(42);
	CHECK(st == IBV_WC_LOC_LEN_ERR, "the short receive WR: %s", ibv_wc_status_str(st));
	struct ibv_wc wc;
	while (ibv_poll_cq(cq, 1, &wc) > 0)
		;
	CHECK(!ibv_destroy_qp(qp) && !ibv_dereg_mr(mr), "destroy");
}

/* A forked child closes the context it inherited, as a kernel
 * provider's child closes its copy of the device file: 0 and silence. */
static void a_forked_child_closes_its_copy(void)
{
	int err[2];
	CHECK(!pipe(err), "pipe");
	pid_t child = fork();
	CHECK(child >= 0, "fork");
	if (child == 0) {
		dup2(err[1], 2);
		close(err[0]);
		_exit(ibv_close_device(ctx) == 0 ? 0 : 1);
	}
	close(err[1]);
	char said[512], rest[512];
	ssize_t n, all = 0;
	while ((n = read(err[0], all < 511 ? said + all : rest, all < 511 ? 511 - all : 512)) > 0)
		all = all < 511 ? all + n : all; /* the first 511 bytes are kept */
	said[all] = 0;
	close(err[0]);
	int status;
	CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "the child's ibv_close_device failed (status %#x)", status);
	CHECK(all == 0, "the child's ibv_close_device printed: %s", said);
}

/* A forked child's verbs on the context it inherited fail with EIO, and
 * touch nothing of the parent's: its poll of a CQ holding the parent's
 * completion gets EIO, not the completion, which the parent then polls. */
static void a_forked_childs_verbs_fail(void)
{
	static char buf[PAGE];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, PAGE, ALL_ACCESS);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *held = ch ? ibv_create_cq(ctx, 4, NULL, ch, 0) : NULL;
	CHECK(mr && held, "MR, channel, CQ");
	struct ibv_qp_init_attr qa = { .send_cq = held, .recv_cq = held, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 1, .max_recv_wr = 1,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	CHECK(qp, "create_qp");
	connect_rc(qp, qp->qp_num, gid, 0, ALL_ACCESS);
	/* A WRITE to itself; its completion event says it is in the CQ. */
	CHECK(!ibv_req_notify_cq(held, 0), "req_notify_cq");
	struct ibv_sge s = { (uintptr_t)buf, 8, mr->lkey };
	struct ibv_send_wr w = { .wr_id = 77, .sg_list = &s, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED }, *bad;
	w.wr.rdma.remote_addr = (uintptr_t)buf + 64;
	w.wr.rdma.rkey = mr->rkey;
	CHECK(!ibv_post_send(qp, &w, &bad), "post_send");
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	CHECK(!ibv_get_cq_event(ch, &ev_cq, &ev_ctx), "get_cq_event");
	ibv_ack_cq_events(held, 1);
	pid_t child = fork();
	CHECK(child >= 0, "fork");
	if (child == 0) {
		struct ibv_wc wc;
		errno = 0;
		int polled = ibv_poll_cq(held, 1, &wc);
		int poll_errno = errno;
		struct ibv_pd *p = ibv_alloc_pd(ctx);
		_exit(polled < 0 && poll_errno == EIO && !p && errno == EIO ? 0 : 1);
	}
	int status;
	CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "a forked child's poll_cq and alloc_pd on the inherited context did not fail with EIO "
	      "(status %#x)", status);
	struct ibv_wc wc;
	int n = ibv_poll_cq(held, 1, &wc);
	CHECK(n == 1 && wc.wr_id == 77 && wc.status == IBV_WC_SUCCESS,
	      "the parent's completion after the child's poll: %d", n);
	CHECK(!ibv_destroy_qp(qp) && !ibv_destroy_cq(held) && !ibv_destroy_comp_channel(ch) &&
	      !ibv_dereg_mr(mr), "destroy");
}

/* The kernel's [vvar] page in this process, from /proc/self/maps. */
static void *vvar_page(void)
{
	FILE *maps = fopen("/proc/self/maps", "r");
	CHECK(maps, "/proc/self/maps");
	char line[512];
	unsigned long start = 0;
	while (!start && fgets(line, sizeof line, maps))
		if (strstr(line, "[vvar"))
			start = strtoul(line, NULL, 16);
	fclose(maps);
	CHECK(start, "no [vvar] mapping");
	return (void *)start;
}

/* Two pages of a shared mapping of a one-page file: the second lies past
 * the file's end, where a load raises SIGBUS and the kernel's pinning
 * fails. */
static void past_a_files_end(void)
{
	FILE *f = tmpfile();
	CHECK(f && ftruncate(fileno(f), PAGE) == 0, "tmpfile");
	void *p = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fileno(f), 0);
	CHECK(p != MAP_FAILED, "mmap of the file");
	struct ibv_mr *mr = ibv_reg_mr(pd, p, PAGE, ALL_ACCESS);
	CHECK(mr, "reg_mr of a file's page: errno %d", errno);
	CHECK(!ibv_dereg_mr(mr), "dereg_mr");
	expect_reg_fails(p, 2 * PAGE, IBV_ACCESS_LOCAL_WRITE, EFAULT, "a page past a file's end");
	munmap(p, 2 * PAGE);
	fclose(f);
}

static void registration_checks(void)
{
	expect_reg_fails(NULL, PAGE, IBV_ACCESS_LOCAL_WRITE, EFAULT, "NULL");
	void *gone = map(PROT_READ | PROT_WRITE);
	munmap(gone, PAGE);
	expect_reg_fails(gone, PAGE, 0, EFAULT, "unmapped memory");
	void *ro = map(PROT_READ);
	expect_reg_fails(ro, 0, 0, EINVAL, "length 0");
	expect_reg_fails(ro, PAGE, IBV_ACCESS_LOCAL_WRITE, EFAULT, "a read-only mapping with LOCAL_WRITE");
	expect_reg_fails(ro, PAGE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, EFAULT,
			 "a read-only mapping with REMOTE_WRITE");
	struct ibv_mr *mr = ibv_reg_mr(pd, ro, PAGE, IBV_ACCESS_REMOTE_READ);
	CHECK(mr, "reg_mr of a read-only mapping for reading: errno %d", errno);
	CHECK(!ibv_dereg_mr(mr), "dereg_mr");
	munmap(ro, PAGE);
	expect_reg_fails(vvar_page(), 8, 0, EFAULT, "the [vvar] page");
	past_a_files_end();
	void *buf = map(PROT_READ | PROT_WRITE);
	errno = 0;
	mr = ibv_reg_mr_iova(pd, buf, PAGE, 0x100005, IBV_ACCESS_LOCAL_WRITE);
	CHECK(!mr && errno == EINVAL, "reg_mr_iova at another offset in the page: got %p errno %d, want NULL and EINVAL",
	      (void *)mr, errno);
	mr = ibv_reg_mr_iova(pd, buf, PAGE, 0x100000, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "reg_mr_iova at the address's offset in the page: errno %d", errno);
	CHECK(!ibv_dereg_mr(mr), "dereg_mr");
	munmap(buf, PAGE);
}

/* ibv_rereg_mr without flags, or moving to a NULL PD: libibverbs passes
 * both to the provider; the kernel refuses the first (EINVAL), and a
 * provider would read through the second. */
static void rereg_mistakes(void)
{
	void *buf = map(PROT_READ | PROT_WRITE);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, PAGE, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "reg_mr: errno %d", errno);
	errno = 0;
	int r = ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0);
	CHECK(r == IBV_REREG_MR_ERR_CMD && errno == EINVAL, "rereg_mr without flags: %d, errno %d", r, errno);
	errno = 0;
	r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, NULL, NULL, 0, 0);
	CHECK(r == IBV_REREG_MR_ERR_CMD && errno == EINVAL, "rereg_mr to a NULL PD: %d, errno %d", r, errno);
	CHECK(mr->pd == pd && !ibv_dereg_mr(mr), "the MR unchanged, then deregistered");
	munmap(buf, PAGE);
}

static void write_only_mapping(void)
{
	void *wo = map(PROT_WRITE);
	struct ibv_mr *target = ibv_reg_mr(pd, wo, PAGE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(target, "reg_mr of a PROT_WRITE mapping for writing: errno %d", errno);
	expect_reg_fails(wo, PAGE, IBV_ACCESS_REMOTE_READ, EFAULT, "a PROT_WRITE mapping for reading alone");
	void *src = map(PROT_READ | PROT_WRITE);
	memset(src, 0x5a, PAGE);
	struct ibv_mr *local = ibv_reg_mr(pd, src, PAGE, ALL_ACCESS);
	CHECK(local, "reg_mr");
	CHECK(one_op(IBV_WR_RDMA_WRITE, local, target) == IBV_WC_SUCCESS, "a WRITE into the PROT_WRITE mapping");
	CHECK(mprotect(wo, PAGE, PROT_READ) == 0 && ((unsigned char *)wo)[63] == 0x5a,
	      "the WRITE did not land");
	CHECK(!ibv_dereg_mr(target) && !ibv_dereg_mr(local), "dereg_mr");
	munmap(wo, PAGE);
	munmap(src, PAGE);
}

static void unmapped_under_an_mr(void)
{
	void *mine = map(PROT_READ | PROT_WRITE);
	struct ibv_mr *local = ibv_reg_mr(pd, mine, PAGE, ALL_ACCESS);
	void *theirs = map(PROT_READ | PROT_WRITE);
	struct ibv_mr *remote = ibv_reg_mr(pd, theirs, PAGE, ALL_ACCESS);
	CHECK(local && remote, "reg_mr");
	CHECK(one_op(IBV_WR_RDMA_WRITE, local, remote) == IBV_WC_SUCCESS, "a healthy WRITE failed");
	munmap(theirs, PAGE);
	enum ibv_wr_opcode remote_ops[] = { IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ, IBV_WR_ATOMIC_FETCH_AND_ADD,
					     IBV_WR_ATOMIC_CMP_AND_SWP };
	for (unsigned i = 0; i < sizeof(remote_ops) / sizeof(remote_ops[0]); i++) {
		enum ibv_wc_status st = one_op(remote_ops[i], local, remote);
		CHECK(st == IBV_WC_REM_ACCESS_ERR, "opcode %d into an unmapped remote MR: status %s",
		      remote_ops[i], ibv_wc_status_str(st));
	}
	munmap(mine, PAGE);
	enum ibv_wc_status st = one_op(IBV_WR_RDMA_WRITE, local, local);
	CHECK(st == IBV_WC_LOC_PROT_ERR, "a WRITE from an unmapped local MR: status %s", ibv_wc_status_str(st));
	CHECK(!ibv_dereg_mr(local) && !ibv_dereg_mr(remote), "dereg_mr");
}

/* A crash reporter: says so and ends the process. */
static void report_and_exit(int sig)
{
	static const char said[] = "crash reporter: a fatal signal\n";
	(void)!write(2, said, sizeof(said) - 1);
	_exit(128 + sig);
}

static void a_fault_handler_installed_after_open(void)
{
	void *mine = map(PROT_READ | PROT_WRITE), *theirs = map(PROT_READ | PROT_WRITE);
	struct ibv_mr *local = ibv_reg_mr(pd, mine, PAGE, ALL_ACCESS);
	struct ibv_mr *remote = ibv_reg_mr(pd, theirs, PAGE, ALL_ACCESS);
	CHECK(local && remote, "reg_mr");
	struct sigaction reporter = { .sa_handler = report_and_exit };
	CHECK(!sigaction(SIGSEGV, &reporter, NULL) && !sigaction(SIGBUS, &reporter, NULL), "sigaction");
	CHECK(!mprotect(theirs, PAGE, PROT_NONE), "mprotect");
	enum ibv_wc_status st = one_op(IBV_WR_RDMA_WRITE, local, remote);
	CHECK(st == IBV_WC_REM_ACCESS_ERR, "a WRITE into a PROT_NONE MR: status %s", ibv_wc_status_str(st));
	CHECK(!mprotect(mine, PAGE, PROT_NONE), "mprotect");
	st = one_op(IBV_WR_RDMA_WRITE, local, remote);
	CHECK(st == IBV_WC_LOC_PROT_ERR, "a WRITE from a PROT_NONE MR: status %s", ibv_wc_status_str(st));
	CHECK(!ibv_dereg_mr(local) && !ibv_dereg_mr(remote), "dereg_mr");
	munmap(mine, PAGE);
	munmap(theirs, PAGE);
}

static void post_checks(void)
{
	static char buf[256];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp *qp = new_qp();
	connect_rc(qp, qp->qp_num, gid, 0, ALL_ACCESS);
	struct ibv_sge sge = { (uintptr_t)buf, 16, mr->lkey };
	struct ibv_send_wr w = { .wr_id = 1, .sg_list = &sge, .num_sge = 0x7fffffff, .opcode = IBV_WR_SEND },
		*bad = NULL;
	CHECK(ibv_post_send(qp, &w, &bad) == EINVAL && bad == &w, "num_sge 0x7fffffff: not EINVAL with bad_wr");
	struct ibv_sge huge = { (uintptr_t)buf, 1u << 30, mr->lkey };
	w.sg_list = &huge; w.num_sge = 1; w.send_flags = IBV_SEND_INLINE; bad = NULL;
	CHECK(ibv_post_send(qp, &w, &bad) == EINVAL && bad == &w, "1 GiB inline: not EINVAL with bad_wr");
	struct ibv_recv_wr r = { .wr_id = 2, .sg_list = &sge, .num_sge = 0x7fffffff }, *rbad = NULL;
	CHECK(ibv_post_recv(qp, &r, &rbad) == EINVAL && rbad == &r, "recv num_sge 0x7fffffff: not EINVAL");
	/* No bad_wr to report through: EINVAL, as rxe answers, not a crash. */
	CHECK(ibv_post_send(qp, &w, NULL) == EINVAL, "post_send with a NULL bad_wr: not EINVAL");
	CHECK(ibv_post_recv(qp, &r, NULL) == EINVAL, "post_recv with a NULL bad_wr: not EINVAL");

	/* errno follows the failure: RTS -> INIT is no transition. */
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT };
	errno = 0;
	int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE);
	CHECK(rc == EINVAL && errno == EINVAL, "modify_qp RTS->INIT: rc %d errno %d", rc, errno);
	CHECK(!ibv_destroy_qp(qp) && !ibv_dereg_mr(mr), "destroy");
}

/* A thread polling a CQ whose device another thread closes. */
static volatile int stop_polling;
static volatile long polls;
static void *poll_until_stopped(void *arg)
{
	struct ibv_cq *c = arg;
	struct ibv_wc wc;
	while (!stop_polling) {
		(void)ibv_poll_cq(c, 1, &wc);
		polls++;
	}
	return NULL;
}

/* Starts a thread polling `c` and returns once it polls. */
static pthread_t start_polling(struct ibv_cq *c)
{
	stop_polling = 0;
	polls = 0;
	pthread_t poller;
	CHECK(!pthread_create(&poller, NULL, poll_until_stopped, c), "poller");
	while (polls < 100)
		sched_yield();
	return poller;
}

/* Forked children close the context they inherited while a parent
 * thread polls it, so that some fork copies the poller mid-verb: each
 * child's close returns (the close waits for the verbs running on the
 * context, and a child's copy of a parent's count is no verb of its). */
static void forked_children_close_while_a_parent_thread_polls(void)
{
	pthread_t poller = start_polling(cq);
	for (int i = 0; i < 50; i++) {
		pid_t child = fork();
		CHECK(child >= 0, "fork");
		if (child == 0) {
			alarm(20); /* a close that never returns ends the child */
			_exit(ibv_close_device(ctx) == 0 ? 0 : 1);
		}
		int status;
		CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "child %d's close (status %#x)", i, status);
	}
	stop_polling = 1;
	CHECK(!pthread_join(poller, NULL), "join");
}

/* ibv_close_device with objects alive (it does not release them), one
 * CQ polled by another thread meanwhile: verbs on those objects
 * afterwards fail, as a kernel provider's do once its file is closed,
 * where they crashed (their context's memory was freed under them). */
static void objects_outliving_their_context(void)
{
	struct ibv_context *c = open_device_named("softverbs0");
	CHECK(c, "open a second context");
	struct ibv_pd *p = ibv_alloc_pd(c);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(c);
	struct ibv_cq *q = ibv_create_cq(c, 16, NULL, NULL, 0);
	CHECK(p && ch && q, "pd, channel, cq of the second context");
	struct ibv_qp_init_attr qa = { .send_cq = q, .recv_cq = q,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC };
	struct ibv_qp *qp = ibv_create_qp(p, &qa);
	static char buf[64];
	struct ibv_mr *mr = ibv_reg_mr(p, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	CHECK(qp && mr, "qp, mr of the second context");
	pthread_t poller = start_polling(q);
	CHECK(!ibv_close_device(c), "close with objects alive");
	stop_polling = 1;
	CHECK(!pthread_join(poller, NULL), "join");

	struct ibv_wc wc;
	CHECK(ibv_poll_cq(q, 1, &wc) < 0, "poll_cq after close");
	CHECK(ibv_req_notify_cq(q, 0) != 0, "req_notify_cq after close");
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey };
	struct ibv_recv_wr rwr = { .sg_list = &sge, .num_sge = 1 }, *bad_rwr;
	CHECK(ibv_post_recv(qp, &rwr, &bad_rwr) != 0, "post_recv after close");
	struct ibv_send_wr swr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND }, *bad_swr;
	CHECK(ibv_post_send(qp, &swr, &bad_swr) != 0, "post_send after close");
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	CHECK(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			    IBV_QP_ACCESS_FLAGS) != 0, "modify_qp after close");
	CHECK(ibv_destroy_qp(qp) != 0 && ibv_dereg_mr(mr) != 0 && ibv_destroy_cq(q) != 0 &&
	      ibv_dealloc_pd(p) != 0, "destroys after close fail");
	/* libibverbs' own destroy, once the context has no state: it releases
	 * the channel. */
	CHECK(!ibv_destroy_comp_channel(ch), "destroy_comp_channel after close");
}

int main(int argc, char **argv)
{
	int late_handler = argc > 1 && !strcmp(argv[1], "late-fault-handler");
	ctx = open_device_named("softverbs0");
	CHECK(ctx, "open");
	CHECK(ctx->cmd_fd >= 0 && fcntl(ctx->cmd_fd, F_GETFD) >= 0, "cmd_fd %d is no descriptor", ctx->cmd_fd);
	int copy = dup(ctx->cmd_fd);
	CHECK(copy >= 0, "dup(cmd_fd)");
	close(copy);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK(pd && cq, "pd, cq");
	CHECK(!ibv_query_gid(ctx, 1, 0, &gid), "query_gid");
	if (late_handler) {
		a_fault_handler_installed_after_open();
		puts("late fault handler ok");
		return 0;
	}

	struct ibv_ah_attr ah = { .is_global = 1, .port_num = 1 };
	ah.grh.dgid = gid;
	ah.grh.flow_label = ~0u;
	struct ibv_ah *h = ibv_create_ah(pd, &ah);
	CHECK(h, "create_ah with flow_label ~0: errno %d", errno);
	CHECK(!ibv_destroy_ah(h), "destroy_ah");

	registration_checks();
	rereg_mistakes();
	write_only_mapping();
	post_checks();
	unmapped_under_an_mr();
	a_forked_child_closes_its_copy();
	a_forked_childs_verbs_fail();
	a_send_longer_than_its_receive(); /* the parent's context after the children */
	forked_children_close_while_a_parent_thread_polls();
	objects_outliving_their_context();

	CHECK(!ibv_destroy_cq(cq) && !ibv_dealloc_pd(pd) && !ibv_close_device(ctx), "close");
	puts("app mistakes ok");
	return 0;
}
