/* A writer process stopped in the middle of its copy into the target's
 * memory (on the same-host path the requester copies, with
 * process_vm_writev; a debugger holds it there) keeps the target's
 * ibv_dereg_mr waiting until the copy ends: its bytes must not land after
 * the verb returned, when the application may have reused the memory. A
 * NIC's or rxe's copy is the device's or the kernel's, which no stopped
 * process holds; until 2026-12-07 the target gave up after a second and
 * the copy landed later (found by a helper).
 *
 * The target (parent) prints "writer PID" once the writer's WRITEs land,
 * then waits for the file GO_FILE: same_host.sh attaches gdb to the
 * writer, which stops it at its next process_vm_writev, and creates the
 * file. The target then deregisters its MR (the script lets the writer
 * go once the target says it waits for it), fills its buffer with 0x55,
 * waits for the writer to end (its next WRITE fails: the MR is gone) and
 * checks that no byte changed. Usage: stopped_writer GO_FILE */
#define _GNU_SOURCE
#include "test_util.h"
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#define LEN 65536

static void writer(struct link *l, struct ibv_pd *pd, struct ibv_cq *cq)
{
	char *src = aligned_alloc(4096, LEN);
	memset(src, 0xAA, LEN);
	struct ibv_mr *mr = ibv_reg_mr(pd, src, LEN, IBV_ACCESS_LOCAL_WRITE);
	struct end peer;
	struct ibv_qp *qp = connect_linked(l, pd, cq, mr, 0, &peer);
	for (;;) {
		struct ibv_sge s = { (uintptr_t)src, LEN, mr->lkey };
		struct ibv_send_wr w = { .sg_list = &s, .num_sge = 1,
					 .opcode = IBV_WR_RDMA_WRITE,
					 .send_flags = IBV_SEND_SIGNALED }, *bad;
		w.wr.rdma.remote_addr = peer.addr;
		w.wr.rdma.rkey = peer.rkey;
		CHECK(!ibv_post_send(qp, &w, &bad), "writer: post");
		struct ibv_wc wc;
		int n;
		while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
			;
		CHECK(n == 1, "writer: poll");
		if (wc.status != IBV_WC_SUCCESS)
			exit(0); /* the target's MR is gone */
	}
}

/* Waits for `path` to exist, 60 s at most. */
static void wait_for_file(const char *path)
{
	struct stat st;
	for (int i = 0; stat(path, &st); i++) {
		CHECK(i < 6000, "no %s within 60 s", path);
		/* The poll interval, not a synchronization. */
		nanosleep(&(struct timespec){ .tv_nsec = 10000000 }, NULL);
	}
}

int main(int argc, char **argv)
{
	CHECK(argc == 2, "usage: stopped_writer GO_FILE");
	struct link link;
	pid_t child = fork_linked(&link);
	struct ibv_pd *pd;
	struct ibv_cq *cq = open_pd_cq(&pd);
	if (child == 0) {
		writer(&link, pd, cq);
		return 0;
	}
	volatile unsigned char *buf = aligned_alloc(4096, LEN);
	memset((void *)buf, 0, LEN);
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	struct ibv_mr *mr = ibv_reg_mr(pd, (void *)buf, LEN, access);
	struct end peer;
	connect_linked(&link, pd, cq, mr, access, &peer);
	while (buf[LEN - 1] != 0xAA)
		;
	printf("writer %d\n", (int)child);
	fflush(stdout);
	wait_for_file(argv[1]);
	CHECK(!ibv_dereg_mr(mr), "dereg_mr");
	printf("ibv_dereg_mr returned\n");
	fflush(stdout);
	memset((void *)buf, 0x55, LEN);
	int status;
	CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "the writer failed");
	int changed = 0;
	for (int i = 0; i < LEN; i++)
		changed += buf[i] != 0x55;
	CHECK(!changed, "%d bytes landed after ibv_dereg_mr returned", changed);
	printf("stopped_writer ok: nothing landed after ibv_dereg_mr returned\n");
	return 0;
}
