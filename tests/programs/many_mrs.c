/* A target process that registers many MRs, more than 65,536 (the
 * same-host path's published MR table once held no more), then one it
 * is written to and read from: a second process, on the same host, WRITEs
 * 64 bytes into that last MR and READs them back over an RC QP, and both
 * complete with success and the data. Usage: many_mrs [MRS] (70000). */
#define _GNU_SOURCE
#include "test_util.h"
#include <stdint.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
#define LEN 4096

int main(int argc, char **argv)
{
	int mrs = argc > 1 ? atoi(argv[1]) : 70000;
	struct link link;
	pid_t target = fork_linked(&link);
	struct ibv_pd *pd;
	struct ibv_cq *cq = open_pd_cq(&pd);
	static char filler[LEN];
	for (int i = 0; target == 0 && i < mrs; i++)
		CHECK(ibv_reg_mr(pd, filler, LEN, ACCESS), "MR %d of %d", i, mrs);
	char *buf = aligned_alloc(LEN, LEN);
	memset(buf, target == 0 ? 0 : 0x5a, LEN);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, LEN, ACCESS);
	struct end peer;
	struct ibv_qp *qp = connect_linked(&link, pd, cq, mr, ACCESS, &peer);
	char done;
	if (target == 0) {
		CHECK(read(link.in, &done, 1) == 1, "wait for the initiator");
		CHECK(buf[0] == 0x5a && buf[63] == 0x5a && buf[64] == 0, "the WRITE's bytes");
		return 0;
	}
	one_wr(qp, cq, mr, buf, &peer, IBV_WR_RDMA_WRITE, "WRITE");
	memset(buf, 0, 64);
	one_wr(qp, cq, mr, buf, &peer, IBV_WR_RDMA_READ, "READ");
	CHECK(buf[0] == 0x5a && buf[63] == 0x5a, "the READ's bytes");
	CHECK(write(link.out, "x", 1) == 1, "release the target");
	int status;
	CHECK(waitpid(target, &status, 0) == target && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "the target failed");
	printf("many_mrs ok: %d MRs before the one written and read\n", mrs);
	return 0;
}
