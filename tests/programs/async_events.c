/* Checks async events on softverbs: a QP attached to an SRQ that enters
 * the error state raises IBV_EVENT_QP_LAST_WQE_REACHED, read with
 * ibv_get_async_event (blocking, from the context's async fd) and acked;
 * an SRQ armed with a limit raises IBV_EVENT_SRQ_LIMIT_REACHED once a WR
 * taken from it leaves fewer than the limit. Usage: async_events [DEVICE
 * GID_INDEX [srq]] (softverbs0 and 0 by default; with `srq`, only the SRQ
 * limit: rxe in Linux 6.1 raises no last WQE event). Prints "async events
 * ok". */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>
#include "test_util.h"

static void expect_event(struct ibv_context *ctx, enum ibv_event_type type, void *element)
{
	struct ibv_async_event ev;
	fprintf(stderr, "waiting for %s\n", ibv_event_type_str(type));
	CHECK(!ibv_get_async_event(ctx, &ev), "get_async_event: %s", strerror(errno));
	CHECK(ev.event_type == type, "event %d, expected %d", ev.event_type, type);
	CHECK(ev.element.qp == element, "event for the wrong object");
	ibv_ack_async_event(&ev);
}

int main(int argc, char **argv)
{
	CHECK(argc == 1 || argc == 3 || (argc == 4 && !strcmp(argv[3], "srq")),
	      "usage: async_events [DEVICE GID_INDEX [srq]]");
	struct ibv_context *ctx = open_device_named(argc >= 3 ? argv[1] : "softverbs0");
	CHECK(ctx, "open");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	static char buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 8, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	CHECK(pd && cq && mr && srq, "resources");
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .srq = srq,
		.cap = { .max_send_wr = 4, .max_send_sge = 1 }, .qp_type = IBV_QPT_RC };
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	CHECK(qp, "create_qp");
	to_rts_via(qp, argc >= 3 ? atoi(argv[2]) : 0);

	/* SRQ limit: 3 WRs posted, limit 3, one SEND to self takes one. */
	for (int i = 0; i < 3; i++) {
		struct ibv_sge s = { (uintptr_t)buf + 1024 * i, 64, mr->lkey };
		struct ibv_recv_wr w = { .wr_id = i, .sg_list = &s, .num_sge = 1 }, *bad;
		CHECK(!ibv_post_srq_recv(srq, &w, &bad), "post_srq_recv");
	}
	struct ibv_srq_attr lim = { .srq_limit = 3 };
	CHECK(!ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT), "arm");
	struct ibv_sge ss = { (uintptr_t)buf + 3072, 8, mr->lkey };
	struct ibv_send_wr sw = { .wr_id = 9, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED }, *bad_s;
	CHECK(!ibv_post_send(qp, &sw, &bad_s), "post_send");
	expect_event(ctx, IBV_EVENT_SRQ_LIMIT_REACHED, srq);
	CHECK(!ibv_query_srq(srq, &lim) && lim.srq_limit == 0, "limit reads 0 after firing");

	/* LAST_WQE_REACHED when the SRQ-attached QP enters ERR. */
	struct ibv_qp_attr err = { .qp_state = IBV_QPS_ERR };
	CHECK(!ibv_modify_qp(qp, &err, IBV_QP_STATE), "to ERR");
	if (argc != 4)
		expect_event(ctx, IBV_EVENT_QP_LAST_WQE_REACHED, qp);

	CHECK(!ibv_destroy_qp(qp) && !ibv_destroy_srq(srq), "destroy");
	CHECK(!ibv_dereg_mr(mr) && !ibv_destroy_cq(cq) && !ibv_dealloc_pd(pd), "teardown");
	CHECK(!ibv_close_device(ctx), "close");
	puts("async events ok");
	return 0;
}
