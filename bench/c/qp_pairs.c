/* qp_pairs: connects PAIRS RC QP pairs between two processes and exchanges
 * messages on all of them, reporting time and memory.
 *
 *   qp_pairs [-d DEV] [-n PAIRS] [-r ROUNDS] [-s SIZE] [-p PORT]             server
 *   qp_pairs [-d DEV] [-n PAIRS] [-r ROUNDS] [-s SIZE] [-p PORT] 127.0.0.1   client
 *
 * Defaults: softverbs0, 1000 pairs, 10 rounds, 64-byte messages, TCP port
 * 18600. As the rdma-core pingpongs do, the two sides swap their QP
 * numbers, PSNs and GID over a TCP side channel (the server listens on
 * 127.0.0.1 only), then bring every QP to RTS and meet at a barrier so no
 * request reaches a QP that is not ready. In each round the client SENDs
 * one message on every QP at once and the server answers each with a SEND
 * on the same QP; the client checks every answer names its QP and round.
 * Both print one line of key=value pairs: setup time (QPs created,
 * exchanged and connected), exchange time, messages per second (both
 * directions), and the resident set before the QPs, once connected, and
 * at its peak. */
#include "common.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

struct peer_info {
	uint32_t qpn, psn;
};

static void xfer(int fd, void *buf, size_t len, int sending)
{
	char *p = buf;
	while (len) {
		ssize_t n = sending ? write(fd, p, len) : read(fd, p, len);
		if (n <= 0)
			DIE("side channel %s failed", sending ? "write" : "read");
		p += n;
		len -= (size_t)n;
	}
}

static int side_channel(const char *host, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		DIE("socket failed");
	if (host) {
		if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
			DIE("bad address %s", host);
		/* The server may still be starting: retry for up to 10 s. */
		for (int tries = 0; connect(fd, (struct sockaddr *)&a, sizeof a); tries++) {
			if (tries == 100)
				DIE("cannot connect to %s:%d", host, port);
			usleep(100000);
		}
		return fd;
	}
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 1))
		DIE("cannot listen on 127.0.0.1:%d", port);
	int c = accept(fd, NULL, NULL);
	if (c < 0)
		DIE("accept failed");
	close(fd);
	return c;
}

static void modify(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, const char *what)
{
	if (ibv_modify_qp(qp, a, mask))
		DIE("ibv_modify_qp to %s failed on QP %#x", what, qp->qp_num);
}

int main(int argc, char **argv)
{
	const char *dev = "softverbs0";
	int pairs = 1000, rounds = 10, size = 64, port = 18600, opt, i;
	while ((opt = getopt(argc, argv, "d:n:r:s:p:")) != -1) {
		switch (opt) {
		case 'd': dev = optarg; break;
		case 'n': pairs = atoi(optarg); break;
		case 'r': rounds = atoi(optarg); break;
		case 's': size = atoi(optarg); break;
		case 'p': port = atoi(optarg); break;
		default: DIE("usage: qp_pairs [-d DEV] [-n PAIRS] [-r ROUNDS] [-s SIZE] [-p PORT] [SERVER]");
		}
	}
	const char *host = optind < argc ? argv[optind] : NULL;
	int client = host != NULL;
	if (pairs < 1 || rounds < 1 || rounds > 64 || size < 8)
		DIE("need PAIRS >= 1, 1 <= ROUNDS <= 64, SIZE >= 8");

	struct ibv_context *ctx = open_device(dev);
	struct ibv_port_attr pattr;
	union ibv_gid gid;
	if (ibv_query_port(ctx, 1, &pattr) || ibv_query_gid(ctx, 1, 0, &gid))
		DIE("cannot query port 1 or GID 0");
	long rss_base = status_kib("VmRSS");
	double t0 = now_s();

	/* One buffer: a send slot then a receive slot per QP. Receives of one
	 * QP share its slot: only one message per QP is in flight at a time. */
	size_t slot = (size_t)size;
	char *buf = calloc((size_t)pairs * 2, slot);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, (size_t)pairs * 2 * slot, IBV_ACCESS_LOCAL_WRITE) : NULL;
	/* Room for a send and a receive completion of every QP at once. */
	struct ibv_cq *cq = ibv_create_cq(ctx, 2 * pairs + 16, NULL, NULL, 0);
	struct ibv_qp **qps = calloc(pairs, sizeof *qps);
	struct peer_info *mine = calloc(pairs, sizeof *mine), *theirs = calloc(pairs, sizeof *theirs);
	if (!buf || !mr || !cq || !qps || !mine || !theirs)
		DIE("buffer, PD, MR or CQ allocation failed");

	struct ibv_qp_init_attr init = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	srand48(getpid());
	for (i = 0; i < pairs; i++) {
		qps[i] = ibv_create_qp(pd, &init);
		if (!qps[i])
			DIE("ibv_create_qp failed after %d QPs", i);
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
					 .qp_access_flags = IBV_ACCESS_LOCAL_WRITE };
		modify(qps[i], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, "INIT");
		/* Every receive this QP will need, posted before the peer can send. */
		for (int r = 0; r < rounds; r++) {
			struct ibv_sge sge = { (uintptr_t)(buf + ((size_t)pairs + i) * slot), (uint32_t)size, mr->lkey };
			struct ibv_recv_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1 }, *bad;
			if (ibv_post_recv(qps[i], &wr, &bad))
				DIE("ibv_post_recv failed on QP %d", i);
		}
		mine[i].qpn = qps[i]->qp_num;
		mine[i].psn = lrand48() & 0xffffff;
	}

	int fd = side_channel(host, port);
	union ibv_gid peer_gid;
	xfer(fd, &gid, sizeof gid, 1);
	xfer(fd, mine, pairs * sizeof *mine, 1);
	xfer(fd, &peer_gid, sizeof peer_gid, 0);
	xfer(fd, theirs, pairs * sizeof *theirs, 0);

	for (i = 0; i < pairs; i++) {
		struct ibv_qp_attr a = {
			.qp_state = IBV_QPS_RTR, .path_mtu = pattr.active_mtu,
			.dest_qp_num = theirs[i].qpn, .rq_psn = theirs[i].psn,
			.max_dest_rd_atomic = 1, .min_rnr_timer = 12,
			.ah_attr = { .is_global = 1, .port_num = 1,
				     .grh = { .dgid = peer_gid, .sgid_index = 0, .hop_limit = 64 } },
		};
		modify(qps[i], &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER, "RTR");
		struct ibv_qp_attr s = { .qp_state = IBV_QPS_RTS, .sq_psn = mine[i].psn,
					 .timeout = 14, .retry_cnt = 7, .rnr_retry = 7, .max_rd_atomic = 1 };
		modify(qps[i], &s, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC, "RTS");
	}
	char token = 'r';
	xfer(fd, &token, 1, 1);
	xfer(fd, &token, 1, 0);
	double t1 = now_s();
	long rss_connected = status_kib("VmRSS");

	/* The exchange. A message carries its QP index and round. */
	struct ibv_wc wc[64];
	long expected_recv = (long)pairs * rounds, recvs = 0, sends = 0;
	int *got_round = calloc(pairs, sizeof *got_round);
	double deadline = now_s() + 120;
	if (!got_round)
		DIE("allocation failed");
	for (int r = 0; r < (client ? rounds : 1); r++) {
		if (client)
			for (i = 0; i < pairs; i++) {
				uint32_t *msg = (uint32_t *)(buf + (size_t)i * slot);
				msg[0] = (uint32_t)i;
				msg[1] = (uint32_t)r;
				struct ibv_sge sge = { (uintptr_t)msg, (uint32_t)size, mr->lkey };
				struct ibv_send_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1,
							  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
				if (ibv_post_send(qps[i], &wr, &bad))
					DIE("ibv_post_send failed on QP %d", i);
			}
		/* Client: until this round's answers (and sends) are all in.
		 * Server: until every message of every round is answered. */
		long want = client ? (long)pairs * (r + 1) : expected_recv;
		while (recvs < want || sends < want) {
			int n = ibv_poll_cq(cq, 64, wc);
			if (n < 0)
				DIE("ibv_poll_cq failed");
			if (n == 0 && now_s() > deadline)
				DIE("timed out: %ld of %ld receives, %ld sends", recvs, want, sends);
			for (int k = 0; k < n; k++) {
				int q = (int)wc[k].wr_id;
				if (wc[k].status != IBV_WC_SUCCESS)
					DIE("completion error %s on QP %d", ibv_wc_status_str(wc[k].status), q);
				if (wc[k].opcode == IBV_WC_SEND) {
					sends++;
					continue;
				}
				recvs++;
				uint32_t *in = (uint32_t *)(buf + ((size_t)pairs + q) * slot);
				if (in[0] != (uint32_t)q || in[1] != (uint32_t)got_round[q])
					DIE("QP %d: message for QP %u round %u, expected round %d", q, in[0], in[1], got_round[q]);
				got_round[q]++;
				if (!client) {
					/* Answer with the same bytes on the same QP. */
					uint32_t *out = (uint32_t *)(buf + (size_t)q * slot);
					memcpy(out, in, slot);
					struct ibv_sge sge = { (uintptr_t)out, (uint32_t)size, mr->lkey };
					struct ibv_send_wr wr = { .wr_id = (uint64_t)q, .sg_list = &sge, .num_sge = 1,
								  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
					if (ibv_post_send(qps[q], &wr, &bad))
						DIE("ibv_post_send failed on QP %d", q);
				}
			}
		}
	}
	double t2 = now_s();
	/* Neither side tears down before the other is done. */
	xfer(fd, &token, 1, 1);
	xfer(fd, &token, 1, 0);
	close(fd);

	printf("qp_pairs role=%s pairs=%d rounds=%d size=%d setup_s=%.3f exchange_s=%.3f "
	       "msgs_per_s=%.0f rss_base_kib=%ld rss_connected_kib=%ld rss_peak_kib=%ld\n",
	       client ? "client" : "server", pairs, rounds, size, t1 - t0, t2 - t1,
	       2.0 * pairs * rounds / (t2 - t1), rss_base, rss_connected, status_kib("VmHWM"));
	for (i = 0; i < pairs; i++)
		ibv_destroy_qp(qps[i]);
	ibv_destroy_cq(cq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	return 0;
}
