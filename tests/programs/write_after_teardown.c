/* Once ibv_destroy_qp or a move to ERR returns, the QP's responder does
 * nothing more: no WRITE lands in the target's memory after, as a NIC's
 * destroy fences its responder (rxe stops its responder task first). A
 * writer process streams RDMA WRITEs into the target's MR; the target,
 * once data lands, tears its QP down (ERR in odd rounds, destroy in even
 * ones), copies its buffer, and tells the writer to stop; the writer
 * moves its own QP to ERR (after which it executes nothing more), takes
 * every completion and says so; the target's buffer must not have
 * changed since its verb returned. The MR stays registered throughout.
 * Usage: write_after_teardown [ROUNDS] (200). */
#define _GNU_SOURCE
#include "test_util.h"
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>

#define LEN 65536
#define CHUNK 4096

/* What the two sides tell each other through shared memory: the round
 * the writer may stop, and the round it is done with. */
struct said { _Atomic int stop, drained; };

static void wait_for(_Atomic int *word, int round)
{
	while (atomic_load(word) < round)
		;
}

static void writer(struct said *said, int rounds, struct link *l, struct ibv_pd *pd,
		   struct ibv_cq *cq)
{
	char *src = aligned_alloc(4096, CHUNK);
	struct ibv_mr *mr = ibv_reg_mr(pd, src, CHUNK, IBV_ACCESS_LOCAL_WRITE);
	for (int r = 1; r <= rounds; r++) {
		struct end peer;
		struct ibv_qp *qp = connect_linked(l, pd, cq, mr, 0, &peer);
		memset(src, r % 255 + 1, CHUNK);
		int outstanding = 0;
		for (unsigned n = 0; atomic_load(&said->stop) < r; n++) {
			struct ibv_sge s = { (uintptr_t)src, CHUNK, mr->lkey };
			struct ibv_send_wr w = { .sg_list = &s, .num_sge = 1,
						 .opcode = IBV_WR_RDMA_WRITE,
						 .send_flags = IBV_SEND_SIGNALED }, *bad;
			w.wr.rdma.remote_addr = peer.addr + (n % (LEN / CHUNK)) * CHUNK;
			w.wr.rdma.rkey = peer.rkey;
			if (outstanding < 4 && !ibv_post_send(qp, &w, &bad))
				outstanding++;
			struct ibv_wc wc;
			outstanding -= ibv_poll_cq(cq, 1, &wc);
		}
		struct ibv_qp_attr err = { .qp_state = IBV_QPS_ERR };
		CHECK(!ibv_modify_qp(qp, &err, IBV_QP_STATE), "writer: ERR");
		while (outstanding > 0) {
			struct ibv_wc wc;
			outstanding -= ibv_poll_cq(cq, 1, &wc);
		}
		CHECK(!ibv_destroy_qp(qp), "writer: destroy_qp");
		atomic_store(&said->drained, r);
	}
}

/* Whether a WRITE of `fill` landed (another process writes `buf`). */
static int landed(const volatile char *buf, char fill)
{
	for (int i = 0; i < LEN; i += CHUNK)
		if (buf[i] == fill)
			return 1;
	return 0;
}

static void target(struct said *said, int rounds, struct link *l, struct ibv_pd *pd,
		   struct ibv_cq *cq)
{
	char *buf = aligned_alloc(4096, LEN), *copy = malloc(LEN);
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, LEN, access);
	unsigned seed = 7;
	for (int r = 1; r <= rounds; r++) {
		memset(buf, 0, LEN);
		struct end peer;
		struct ibv_qp *qp = connect_linked(l, pd, cq, mr, access, &peer);
		while (!landed(buf, r % 255 + 1))
			;
		for (volatile int spin = rand_r(&seed) % 20000; spin > 0; spin--)
			;
		if (r % 2) {
			struct ibv_qp_attr err = { .qp_state = IBV_QPS_ERR };
			CHECK(!ibv_modify_qp(qp, &err, IBV_QP_STATE), "target: ERR");
		} else {
			CHECK(!ibv_destroy_qp(qp), "target: destroy_qp");
		}
		memcpy(copy, buf, LEN);
		atomic_store(&said->stop, r);
		wait_for(&said->drained, r);
		int changed = 0;
		for (int i = 0; i < LEN; i++)
			changed += copy[i] != buf[i];
		CHECK(!changed, "round %d: %d bytes landed after %s returned", r, changed,
		      r % 2 ? "the move to ERR" : "ibv_destroy_qp");
		if (r % 2)
			CHECK(!ibv_destroy_qp(qp), "target: destroy_qp");
		struct ibv_wc wc;
		while (ibv_poll_cq(cq, 1, &wc) > 0)
			;
	}
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 200;
	struct said *said = mmap(NULL, sizeof(*said), PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(said != MAP_FAILED, "shared memory");
	struct link link;
	pid_t child = fork_linked(&link);
	struct ibv_pd *pd;
	struct ibv_cq *cq = open_pd_cq(&pd);
	if (child == 0) {
		target(said, rounds, &link, pd, cq);
		return 0;
	}
	writer(said, rounds, &link, pd, cq);
	int status;
	CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "the target failed");
	printf("write_after_teardown ok: %d rounds, no WRITE after the target's QP went\n", rounds);
	return 0;
}
