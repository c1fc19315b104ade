/* qp_scale: memory per idle RC QP. Creates COUNT RC QPs in one process
 * (one PD, one CQ shared by all, as the QPs are what is measured) and
 * reports the growth of the resident set divided by COUNT, then destroys
 * them. The QPs stay in RESET: idle, with the caps given.
 *
 *   qp_scale [-d DEV] [-n COUNT] [-s MAX_SEND_WR] [-r MAX_RECV_WR]
 *
 * Defaults: softverbs0, 10000 QPs, 128 send and 128 receive WRs, one SGE
 * each, no inline data (perftest's send-queue depth; caps a typical
 * application asks for). Prints one line of key=value pairs. */
#include "common.h"
#include <unistd.h>

int main(int argc, char **argv)
{
	const char *dev = "softverbs0";
	int count = 10000, send_wr = 128, recv_wr = 128, opt, i;
	while ((opt = getopt(argc, argv, "d:n:s:r:")) != -1) {
		switch (opt) {
		case 'd': dev = optarg; break;
		case 'n': count = atoi(optarg); break;
		case 's': send_wr = atoi(optarg); break;
		case 'r': recv_wr = atoi(optarg); break;
		default: DIE("usage: qp_scale [-d DEV] [-n COUNT] [-s MAX_SEND_WR] [-r MAX_RECV_WR]");
		}
	}
	if (count < 1)
		DIE("-n must be positive");

	struct ibv_context *ctx = open_device(dev);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 1024, NULL, NULL, 0);
	struct ibv_qp **qps = calloc(count, sizeof *qps);
	if (!pd || !cq || !qps)
		DIE("PD, CQ or array allocation failed");
	struct ibv_qp_init_attr init = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = send_wr, .max_recv_wr = recv_wr,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};

	/* Create one QP first: it pays for one-time costs (the first slot's
	 * socket, tables sized on first use) that are not per QP. */
	struct ibv_qp *first = ibv_create_qp(pd, &init);
	if (!first)
		DIE("ibv_create_qp failed for the first QP");

	long rss0 = status_kib("VmRSS");
	double t0 = now_s();
	for (i = 0; i < count; i++) {
		qps[i] = ibv_create_qp(pd, &init);
		if (!qps[i])
			DIE("ibv_create_qp failed after %d QPs", i);
	}
	double t1 = now_s();
	long rss1 = status_kib("VmRSS");
	for (i = 0; i < count; i++)
		if (ibv_destroy_qp(qps[i]))
			DIE("ibv_destroy_qp failed at QP %d", i);
	double t2 = now_s();
	long rss2 = status_kib("VmRSS");

	printf("qp_scale qps=%d send_wr=%d recv_wr=%d rss_before_kib=%ld rss_after_kib=%ld "
	       "rss_destroyed_kib=%ld bytes_per_qp=%.0f create_s=%.3f destroy_s=%.3f\n",
	       count, send_wr, recv_wr, rss0, rss1, rss2,
	       (rss1 - rss0) * 1024.0 / count, t1 - t0, t2 - t1);
	ibv_destroy_qp(first);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	free(qps);
	return 0;
}
