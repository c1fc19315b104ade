/* Checks ibv_create_cq_ex and its polling API on softverbs, in one
 * process: an RC QP connected to itself sends to itself; the send and
 * receive completions are read with ibv_start_poll / ibv_next_poll /
 * ibv_wc_read_*. Also checks that unsupported completion fields
 * (timestamps) are refused with EOPNOTSUPP. Usage: cq_ex [DEVICE GID_INDEX]
 * (softverbs0 and 0 by default; on another device the timestamp check is
 * skipped). Prints how long the receive completion took to come, and
 * "cq_ex ok" on success. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>
#include "test_util.h"


/* The GID the QP is addressed by (argv[2]; 0 on softverbs). */
static int gid_index;

static void connect_to_self(struct ibv_qp *qp)
{
	union ibv_gid gid;
	CHECK(!ibv_query_gid(qp->context, 1, gid_index, &gid), "query_gid");
	connect_rc(qp, qp->qp_num, gid, gid_index, IBV_ACCESS_REMOTE_WRITE);
}

int main(int argc, char **argv)
{
	const char *name = argc > 1 ? argv[1] : "softverbs0";
	gid_index = argc > 2 ? atoi(argv[2]) : 0;
	struct ibv_context *ctx = open_device_named(name);
	CHECK(ctx, "open");

	/* softverbs' own answer; another device may offer timestamps. */
	struct ibv_cq_init_attr_ex bad = { .cqe = 8, .wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP };
	CHECK(argc > 1 || (!ibv_create_cq_ex(ctx, &bad) && errno == EOPNOTSUPP), "timestamps must be EOPNOTSUPP");

	struct ibv_cq_init_attr_ex ca = { .cqe = 16,
		.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_IMM };
	struct ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &ca);
	CHECK(cq, "create_cq_ex: %s", strerror(errno));
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	static char buf[8192];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(pd && mr, "pd/mr");
	struct ibv_qp_init_attr qa = { .send_cq = ibv_cq_ex_to_cq(cq), .recv_cq = ibv_cq_ex_to_cq(cq),
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC };
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	CHECK(qp, "create_qp");
	connect_to_self(qp);

	strcpy(buf, "hello cq_ex");
	struct ibv_sge rs = { (uintptr_t)buf + 4096, 4096, mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 7, .sg_list = &rs, .num_sge = 1 }, *bad_r;
	CHECK(!ibv_post_recv(qp, &rwr, &bad_r), "post_recv");
	struct ibv_sge ss = { (uintptr_t)buf, 12, mr->lkey };
	struct ibv_send_wr swr = { .wr_id = 9, .sg_list = &ss, .num_sge = 1,
		.opcode = IBV_WR_SEND_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
		.imm_data = htobe32(0x1234) }, *bad_s;
	CHECK(!ibv_post_send(qp, &swr, &bad_s), "post_send");

	int seen_send = 0, seen_recv = 0;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	double ms = 0;
	for (; ms < 10000 && !(seen_send && seen_recv);
	     clock_gettime(CLOCK_MONOTONIC, &t),
	     ms = (t.tv_sec - t0.tv_sec) * 1e3 + (t.tv_nsec - t0.tv_nsec) / 1e6) {
		struct ibv_poll_cq_attr pa = {};
		int ret = ibv_start_poll(cq, &pa);
		if (ret == ENOENT)
			continue;
		CHECK(!ret, "start_poll: %d", ret);
		do {
			CHECK(cq->status == IBV_WC_SUCCESS, "status %d vendor_err %u", cq->status,
			      ibv_wc_read_vendor_err(cq));
			CHECK(ibv_wc_read_qp_num(cq) == qp->qp_num, "qp_num");
			if (cq->wr_id == 9) {
				CHECK(ibv_wc_read_opcode(cq) == IBV_WC_SEND, "send opcode");
				seen_send = 1;
			} else {
				CHECK(cq->wr_id == 7, "wr_id %llu", (unsigned long long)cq->wr_id);
				CHECK(ibv_wc_read_opcode(cq) == IBV_WC_RECV, "recv opcode");
				CHECK(ibv_wc_read_byte_len(cq) == 12, "byte_len %u", ibv_wc_read_byte_len(cq));
				CHECK(ibv_wc_read_wc_flags(cq) & IBV_WC_WITH_IMM, "WITH_IMM");
				CHECK(be32toh(ibv_wc_read_imm_data(cq)) == 0x1234, "imm");
				CHECK(!strcmp(buf + 4096, "hello cq_ex"), "data");
				seen_recv = 1;
				/* Timed here, not at the loop's head: the loop's
				 * clock was read before this poll began. */
				clock_gettime(CLOCK_MONOTONIC, &t);
				printf("receive completion after %.0f ms\n",
				       (t.tv_sec - t0.tv_sec) * 1e3 + (t.tv_nsec - t0.tv_nsec) / 1e6);
			}
		} while (!(ret = ibv_next_poll(cq)));
		CHECK(ret == ENOENT, "next_poll: %d", ret);
		ibv_end_poll(cq);
	}
	CHECK(seen_send && seen_recv, "completions missing (send %d recv %d)", seen_send, seen_recv);
	CHECK(!ibv_destroy_qp(qp) && !ibv_dereg_mr(mr) && !ibv_dealloc_pd(pd), "teardown");
	CHECK(!ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), "destroy_cq");
	CHECK(!ibv_close_device(ctx), "close");
	puts("cq_ex ok");
	return 0;
}
