/* Once a SEND's sender has its successful completion, the receive
 * completion is in the receiver's CQ: on a NIC the responder's completion
 * precedes the ACK the sender completes on, and programs rely on it (a
 * peer that completed its last SEND and disconnects expects the receiver
 * to find that message before the disconnection). A sender process SENDs
 * ROUNDS messages one at a time; after each completes, it tells the
 * receiver through shared memory, which the receiver spins on and then
 * polls its CQ exactly once: that poll must return the receive. The
 * receiver's progress thread, woken by the delivery, is often applying it
 * just then.
 * Both sides spin, yielding the CPU every 64 turns: a spinner that never
 * yields holds its CPU for a whole time slice while the other side (or
 * its progress thread) waits for one, and on a loaded 2-CPU host rounds
 * took milliseconds (500,000 rounds ran past same_host.sh's 120 s, and
 * 100,000 past run.sh's). The yield comes before the one poll, so the
 * race the test looks for is left as it was.
 * Usage: completion_order [ROUNDS] (200000). */
#define _GNU_SOURCE
#include "test_util.h"
#include <stdatomic.h>
#include <sched.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define LEN 64

/* Spins until `*word` exceeds `i`, yielding every 64 turns; exits if the
 * other process ended meanwhile (`gone` says). */
static void wait_past(_Atomic int *word, int i, int (*gone)(void), const char *what)
{
	for (unsigned spins = 1; atomic_load(word) <= i; spins++) {
		CHECK(spins % 4096 || !gone(), "round %d: the other process ended before %s", i, what);
		if (spins % 64 == 0)
			sched_yield();
	}
}

static pid_t other;
static int sender_gone(void) { return getppid() != other; }
static int receiver_gone(void) { return waitpid(other, NULL, WNOHANG) != 0; }

/* What each side tells the other, in memory both share: how many of the
 * sender's SENDs completed, and how many receives the receiver posted. */
struct said { _Atomic int sent, posted; };

static void receiver(struct said *said, int rounds, struct ibv_qp *qp, struct ibv_cq *cq,
		     struct ibv_mr *mr)
{
	struct ibv_sge s = { (uintptr_t)mr->addr, LEN, mr->lkey };
	for (int i = 0; i < rounds; i++) {
		struct ibv_recv_wr w = { .wr_id = i, .sg_list = &s, .num_sge = 1 }, *bad;
		CHECK(!ibv_post_recv(qp, &w, &bad), "post_recv %d", i);
		atomic_store(&said->posted, i + 1);
		wait_past(&said->sent, i, sender_gone, "its SEND completed");
		struct ibv_wc wc;
		int n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n == 1, "round %d: the receive completion was not in the CQ once the "
		      "sender's SEND had completed (%d polled)", i, n);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.wr_id == (uint64_t)i,
		      "round %d: %s, opcode %d, wr_id %llu", i, ibv_wc_status_str(wc.status),
		      wc.opcode, (unsigned long long)wc.wr_id);
	}
}

static void sender(struct said *said, int rounds, struct ibv_qp *qp, struct ibv_cq *cq,
		   struct ibv_mr *mr)
{
	struct ibv_sge s = { (uintptr_t)mr->addr, LEN, mr->lkey };
	for (int i = 0; i < rounds; i++) {
		struct ibv_send_wr w = { .wr_id = i, .sg_list = &s, .num_sge = 1,
					 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
		wait_past(&said->posted, i, receiver_gone, "posting its receive");
		CHECK(!ibv_post_send(qp, &w, &bad), "post_send %d", i);
		struct ibv_wc wc;
		int n;
		for (unsigned polls = 1; (n = ibv_poll_cq(cq, 1, &wc)) == 0; polls++)
			if (polls % 64 == 0)
				sched_yield();
		CHECK(n == 1 && wc.status == IBV_WC_SUCCESS, "SEND %d: %s", i,
		      n == 1 ? ibv_wc_status_str(wc.status) : "poll failed");
		atomic_store(&said->sent, i + 1);
	}
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 200000;
	struct said *said = mmap(NULL, sizeof(*said), PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(said != MAP_FAILED, "shared memory");
	struct link link;
	pid_t parent = getpid();
	pid_t target = fork_linked(&link);
	other = target == 0 ? parent : target;
	struct ibv_pd *pd;
	struct ibv_cq *cq = open_pd_cq(&pd);
	char *buf = aligned_alloc(4096, 4096);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct end peer;
	struct ibv_qp *qp = connect_linked(&link, pd, cq, mr, IBV_ACCESS_LOCAL_WRITE, &peer);
	if (target == 0) {
		receiver(said, rounds, qp, cq, mr);
		return 0;
	}
	sender(said, rounds, qp, cq, mr);
	int status;
	CHECK(waitpid(target, &status, 0) == target && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "the receiver failed");
	printf("completion_order ok: %d receives each in the CQ once their SEND completed\n", rounds);
	return 0;
}
