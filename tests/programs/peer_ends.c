/* A peer on the same host that ends while connected: what its requester
 * gets. Usage: peer_ends exec|kill.
 *
 * exec: the target registers an MR at a fixed address, connects, then
 * replaces its image (exec of this program as `victim`, which maps the
 * same address), keeping its pid. The requester's WRITEs with the old
 * rkey must stop completing with success and end in RETRY_EXC_ERR, as
 * from a dead host: a kernel provider's QP and MR are gone with the exec.
 * None may land: the requester looks, before each copy, whether the pid
 * still maps the target's region, and it starts once the exec closed the
 * target's pipes, after the new image replaced the old. (Until 2026-12-07
 * only the daemon's mark, when it saw the target's connection close, or
 * a fault stopped them: on a loaded host over 1,000 WRITEs landed in the
 * new image's page first, each a success; before that mark, every one
 * did.)
 *
 * return: as exec, and then the new image (same pid) opens the device
 * again and connects a new QP to a new one of the requester, which must
 * reach it: a WRITE lands in its new MR (one pid, an old context gone
 * and a new one to serve).
 *
 * kill: the target posts no receive WR, so the requester's SEND, with
 * rnr_retry 7 (retry for ever), waits in RNR retries; the target is then
 * killed. The SEND must end in RETRY_EXC_ERR, not wait for ever. */
#define _GNU_SOURCE
#include "test_util.h"
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
#define LEN 4096
/* Where the target's MR and the victim's page lie. */
#define FIXED ((void *)0x7e0000000000UL)

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* Waits up to `limit` seconds for one completion; its status, or -1. */
static int completion(struct ibv_cq *cq, double limit)
{
	struct ibv_wc wc;
	for (double end = now() + limit; now() < end;)
		if (ibv_poll_cq(cq, 1, &wc) == 1)
			return wc.status;
	return -1;
}

/* A page at FIXED, or exit. */
static char *fixed_page(void)
{
	char *p = mmap(FIXED, LEN, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	CHECK(p == FIXED, "map %p", FIXED);
	return p;
}

/* The new image of `return`: connects over `back` and checks that the
 * requester's WRITE lands in its new MR. */
static int come_back(struct link *back)
{
	char *buf = fixed_page();
	struct ibv_pd *pd;
	struct ibv_cq *cq = open_pd_cq(&pd);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, LEN, ACCESS);
	struct end peer;
	connect_linked(back, pd, cq, mr, ACCESS, &peer);
	char done;
	CHECK(write(back->out, "r", 1) == 1 && read(back->in, &done, 1) == 1, "the WRITE");
	CHECK(buf[0] == 0x5a && buf[63] == 0x5a && buf[64] == 0, "the WRITE landed in the new MR");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "victim")) {
		if (argc == 4) {
			struct link back = { atoi(argv[2]), atoi(argv[3]) };
			return come_back(&back);
		}
		fixed_page(); /* what the old rkey's address now names */
		pause();
		return 0;
	}
	CHECK(argc == 2 && (!strcmp(argv[1], "exec") || !strcmp(argv[1], "return") ||
			    !strcmp(argv[1], "kill")),
	      "usage: peer_ends exec|return|kill");
	int returns = !strcmp(argv[1], "return");
	int execs = returns || !strcmp(argv[1], "exec");
	/* For `return`: pipes the exec keeps open, for the new image. */
	int to_victim[2], from_victim[2];
	CHECK(!returns || (!pipe(to_victim) && !pipe(from_victim)), "pipe");
	struct link link;
	pid_t target = fork_linked(&link);
	/* The target, exec'd or not, goes with the requester, even when a
	 * check fails before the requester kills it (it outlived the test). */
	if (target == 0)
		CHECK(!prctl(PR_SET_PDEATHSIG, SIGKILL) && getppid() != 1, "PR_SET_PDEATHSIG");
	struct ibv_pd *pd;
	struct ibv_cq *cq = open_pd_cq(&pd);
	char *buf = target == 0 ? fixed_page() : aligned_alloc(LEN, LEN);
	memset(buf, target == 0 ? 0 : 0x5a, LEN);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, LEN, ACCESS);
	struct end peer;
	struct ibv_qp *qp = connect_linked(&link, pd, cq, mr, ACCESS, &peer);
	char go;
	if (target == 0) {
		CHECK(write(link.out, "r", 1) == 1 && read(link.in, &go, 1) == 1, "wait for the requester");
		if (returns) {
			char in[16], out[16];
			snprintf(in, sizeof(in), "%d", to_victim[0]);
			snprintf(out, sizeof(out), "%d", from_victim[1]);
			execl("/proc/self/exe", argv[0], "victim", in, out, (char *)NULL);
		} else if (execs) {
			execl("/proc/self/exe", argv[0], "victim", (char *)NULL);
		}
		pause(); /* kill: until killed */
		return 1;
	}
	CHECK(read(link.in, &go, 1) == 1, "the target is connected");
	struct ibv_sge s = { (uintptr_t)buf, 64, mr->lkey };
	struct ibv_send_wr w = { .sg_list = &s, .num_sge = 1, .send_flags = IBV_SEND_SIGNALED }, *bad;
	if (execs) {
		/* The pipes are close-on-exec: end of file once it exec'd. */
		CHECK(write(link.out, "x", 1) == 1 && read(link.in, &go, 1) == 0, "the target's exec");
		w.opcode = IBV_WR_RDMA_WRITE;
		w.wr.rdma.remote_addr = peer.addr;
		w.wr.rdma.rkey = peer.rkey;
	} else {
		w.opcode = IBV_WR_SEND;
		CHECK(!ibv_post_send(qp, &w, &bad), "post SEND");
		CHECK(completion(cq, 0.3) == -1, "the SEND completed without a receive WR");
		kill(target, SIGKILL);
	}
	double t0 = now();
	int status, landed = 0;
	do {
		if (execs)
			CHECK(!ibv_post_send(qp, &w, &bad), "post WRITE");
		status = completion(cq, 20);
	} while (execs && status == IBV_WC_SUCCESS && ++landed < 1000);
	CHECK(status == IBV_WC_RETRY_EXC_ERR && landed == 0,
	      "%s after the target's %s: %s (%d WRITEs landed)", execs ? "WRITE" : "SEND", argv[1],
	      status < 0 ? "no completion in 20 s" : ibv_wc_status_str(status), landed);
	double ended = now() - t0;
	if (returns) {
		struct link back = { from_victim[0], to_victim[1] };
		struct end again;
		struct ibv_qp *qp2 = connect_linked(&back, pd, cq, mr, ACCESS, &again);
		CHECK(read(back.in, &go, 1) == 1, "the new image is connected");
		w.wr.rdma.remote_addr = again.addr;
		w.wr.rdma.rkey = again.rkey;
		CHECK(!ibv_post_send(qp2, &w, &bad), "post WRITE to the new image");
		status = completion(cq, 20);
		CHECK(status == IBV_WC_SUCCESS, "WRITE to the target's new image: %s",
		      status < 0 ? "no completion in 20 s" : ibv_wc_status_str(status));
		int exit_status;
		CHECK(write(back.out, "d", 1) == 1 && waitpid(target, &exit_status, 0) == target &&
			      WIFEXITED(exit_status) && WEXITSTATUS(exit_status) == 0,
		      "the new image saw the WRITE");
	} else {
		kill(target, SIGKILL);
		waitpid(target, NULL, 0);
	}
	printf("peer_ends %s ok: RETRY_EXC_ERR %.2f s after (%d WRITEs landed first)%s\n", argv[1],
	       ended, landed, returns ? "; the new image was reached" : "");
	return 0;
}
