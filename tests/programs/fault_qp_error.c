/* Checks the qp_error rules of SOFTVERBS_FAULTS on an RC QP connected to
 * itself. Run with `qp_error after=3`, it posts three receive WRs (each
 * accepted) and then finds the QP failed; run with `qp_error at=TIME`, it
 * posts two and blocks in ibv_get_async_event until the rule's time comes.
 * Either way IBV_EVENT_QP_FATAL names the QP, ibv_query_qp reports ERR and
 * every posted WR completes with IBV_WC_WR_FLUSH_ERR. With `after`, the
 * async descriptor is made non-blocking first: ibv_get_async_event fails
 * with EAGAIN before the rule fires, and poll() finds the event.
 * Usage: fault_qp_error after|at [DEVICE GID_INDEX] (softverbs0 and 0 by
 * default). Prints "qp_error ok". */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include "test_util.h"

int main(int argc, char **argv)
{
	CHECK((argc == 2 || argc == 4) && (!strcmp(argv[1], "after") || !strcmp(argv[1], "at")),
	      "usage: fault_qp_error after|at [DEVICE GID_INDEX]");
	int after = !strcmp(argv[1], "after"), posts = after ? 3 : 2;
	struct ibv_context *ctx = open_device_named(argc == 4 ? argv[2] : "softverbs0");
	CHECK(ctx, "open: %s", strerror(errno));
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(pd && cq, "pd/cq");
	static char buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_qp_init_attr init = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &init);
	CHECK(mr && qp, "mr/qp");
	to_rts_via(qp, argc == 4 ? atoi(argv[3]) : 0);
	struct ibv_async_event ev;
	if (after) {
		int fl = fcntl(ctx->async_fd, F_GETFL);
		CHECK(fl >= 0 && !fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK), "fcntl: %s", strerror(errno));
		CHECK(ibv_get_async_event(ctx, &ev) && errno == EAGAIN,
		      "non-blocking ibv_get_async_event before the rule: %s", strerror(errno));
	}
	for (int i = 1; i <= posts; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;
		CHECK(!ibv_post_recv(qp, &wr, &bad), "post_recv %d: %s", i, strerror(errno));
	}
	if (after) {
		struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };
		CHECK(poll(&p, 1, 10000) == 1, "poll on the async descriptor: no event");
	}
	CHECK(!ibv_get_async_event(ctx, &ev), "get_async_event: %s", strerror(errno));
	CHECK(ev.event_type == IBV_EVENT_QP_FATAL && ev.element.qp == qp,
	      "event %s, expected IBV_EVENT_QP_FATAL for the QP", ibv_event_type_str(ev.event_type));
	ibv_ack_async_event(&ev);
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr got;
	CHECK(!ibv_query_qp(qp, &attr, IBV_QP_STATE, &got), "query_qp");
	CHECK(attr.qp_state == IBV_QPS_ERR, "state %d, expected ERR", attr.qp_state);
	struct ibv_wc wc[8];
	int n = ibv_poll_cq(cq, 8, wc);
	CHECK(n == posts, "%d completions, expected %d", n, posts);
	for (int i = 0; i < n; i++)
		CHECK(wc[i].status == IBV_WC_WR_FLUSH_ERR && wc[i].wr_id == (uint64_t)i + 1,
		      "completion %d: %s, wr_id %llu", i, ibv_wc_status_str(wc[i].status),
		      (unsigned long long)wc[i].wr_id);
	ibv_destroy_qp(qp);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("qp_error ok\n");
	return 0;
}
