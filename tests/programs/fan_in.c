/* Several sender processes, each with its own context, WRITE into one
 * receiver context at once: each sender's send budget is five eighths of
 * a buffer the size of its own, standing for the receiver's, and the
 * senders do not know of each other, so together they can overflow the
 * receiver's socket (softverbs' flow control is per sending context:
 * supported.md, "Wire flow control"). The receiver marks what arrives
 * while its queue fills and the senders, told, keep fewer packets in
 * flight; what the kernel still drops is lost like any packet on a
 * network and must be recovered: every WRITE completes with success
 * under the default timeout and retry count.
 * Usage: fan_in [SENDERS] [WRITES] (8, 500). Prints "fan-in ok". */
#define _GNU_SOURCE
#include "test_util.h"
#include <sys/wait.h>

#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
#define LEN (64 * 1024)
#define MAX_SENDERS 64

/* One sender: `n` WRITEs of LEN bytes into the receiver's MR, four at a
 * time (connect_linked's send queue), once the receiver says go. */
static void sender(struct link *l, int n)
{
	struct ibv_pd *pd;
	struct ibv_cq *cq = open_pd_cq(&pd);
	char *buf = aligned_alloc(4096, LEN);
	CHECK(buf, "buffer");
	memset(buf, 0x5a, LEN);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, LEN, ACCESS);
	struct end rx;
	struct ibv_qp *qp = connect_linked(l, pd, cq, mr, ACCESS, &rx);
	char go;
	CHECK(read(l->in, &go, 1) == 1, "the receiver's go");
	int posted = 0, done = 0;
	while (done < n) {
		for (; posted < n && posted - done < 4; posted++) {
			struct ibv_sge s = { (uintptr_t)buf, LEN, mr->lkey };
			struct ibv_send_wr w = { .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
						 .send_flags = IBV_SEND_SIGNALED }, *bad;
			w.wr.rdma.remote_addr = rx.addr;
			w.wr.rdma.rkey = rx.rkey;
			CHECK(!ibv_post_send(qp, &w, &bad), "post WRITE %d", posted);
		}
		struct ibv_wc wc[4];
		int k = ibv_poll_cq(cq, 4, wc);
		CHECK(k >= 0, "poll");
		for (int i = 0; i < k; i++)
			CHECK(wc[i].status == IBV_WC_SUCCESS, "WRITE %d: %s", done + i,
			      ibv_wc_status_str(wc[i].status));
		done += k;
	}
	struct ibv_context *ctx = pd->context;
	CHECK(!ibv_destroy_qp(qp) && !ibv_dereg_mr(mr) && !ibv_destroy_cq(cq) && !ibv_dealloc_pd(pd) &&
	      !ibv_close_device(ctx), "close");
	exit(0);
}

int main(int argc, char **argv)
{
	int senders = argc > 1 ? atoi(argv[1]) : 8, writes = argc > 2 ? atoi(argv[2]) : 500;
	CHECK(senders > 0 && senders <= MAX_SENDERS && writes > 0, "usage: fan_in [SENDERS] [WRITES]");
	struct link links[MAX_SENDERS];
	pid_t pids[MAX_SENDERS];
	for (int i = 0; i < senders; i++) {
		pids[i] = fork_linked(&links[i]);
		if (pids[i] == 0) {
			/* Not the earlier senders' pipes: each must see EOF
			 * when the receiver ends. */
			for (int j = 0; j < i; j++)
				close(links[j].in), close(links[j].out);
			sender(&links[i], writes);
		}
	}
	struct ibv_pd *pd;
	struct ibv_cq *cq = open_pd_cq(&pd);
	char *buf = aligned_alloc(4096, LEN);
	CHECK(buf, "buffer");
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, LEN, ACCESS);
	struct end peer;
	struct ibv_qp *qps[MAX_SENDERS];
	for (int i = 0; i < senders; i++)
		qps[i] = connect_linked(&links[i], pd, cq, mr, ACCESS, &peer);
	for (int i = 0; i < senders; i++)
		CHECK(write(links[i].out, "g", 1) == 1, "go to sender %d", i);
	int failed = 0;
	for (int i = 0; i < senders; i++) {
		int st;
		CHECK(waitpid(pids[i], &st, 0) == pids[i], "wait for sender %d", i);
		failed += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	CHECK(!failed, "%d of %d senders failed", failed, senders);
	/* Closed, so that the receiver's context reports what it marked
	 * (SOFTVERBS_STATS prints when a context closes). */
	struct ibv_context *ctx = pd->context;
	for (int i = 0; i < senders; i++)
		CHECK(!ibv_destroy_qp(qps[i]), "destroy QP %d", i);
	CHECK(!ibv_dereg_mr(mr) && !ibv_destroy_cq(cq) && !ibv_dealloc_pd(pd) && !ibv_close_device(ctx),
	      "close");
	printf("fan-in ok: %d senders, %d WRITEs of %d bytes each\n", senders, writes, LEN);
	return 0;
}
