/* A client of ibv_rc_pingpong's server that exits right after its last
 * poll: exit(0), no ibv_destroy_*, no ibv_close_device. Its last poll
 * hands over the receive of the server's last SEND, whose ACK softverbs
 * may keep for the thread's next verb (architecture.md, "Threading and
 * progress"); there is none, so only the provider's exit handler can send
 * it, and without it the server's last SEND ends in RETRY_EXC_ERR. A NIC
 * acknowledges on receipt, whatever the process does next.
 *
 * Usage: exit_after_poll DEVICE GID_INDEX PORT SERVER ITERS. Speaks
 * ibv_rc_pingpong's exchange (rdma-core's libibverbs/examples): over TCP,
 * "LID:QPN:PSN:GID" each way (the GID's 16 bytes as 32 hex digits), then
 * "done"; 4096-byte messages, path MTU 1024, timeout 14, 7 retries. It
 * spins on its CQ, as ibv_rc_pingpong does. */
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "test_util.h"

#define SIZE 4096
#define RX_DEPTH 500
#define RECV_WRID 1
#define SEND_WRID 2

struct dest {
	int lid, qpn, psn;
	union ibv_gid gid;
};

static struct ibv_qp *qp;
static struct ibv_mr *mr;
static char *buf;

/* A TCP connection to HOST:PORT; exits on failure. */
static int tcp_connect(const char *host, const char *port)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res;
	CHECK(!getaddrinfo(host, port, &hints, &res), "getaddrinfo %s", host);
	int fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
	CHECK(fd >= 0 && !connect(fd, res->ai_addr, res->ai_addrlen), "connect to %s:%s", host, port);
	freeaddrinfo(res);
	return fd;
}

/* Reads exactly LEN bytes; exits on a short read. */
static void read_all(int fd, char *p, size_t len)
{
	while (len) {
		ssize_t n = read(fd, p, len);
		CHECK(n > 0, "the server closed the exchange");
		p += n;
		len -= (size_t)n;
	}
}

/* Sends ours, reads the server's, says "done" (ibv_rc_pingpong's client). */
static struct dest exchange(int fd, const struct dest *me)
{
	char msg[sizeof "0000:000000:000000:00000000000000000000000000000000"];
	const uint8_t *g = me->gid.raw;
	int len = snprintf(msg, sizeof msg, "%04x:%06x:%06x:", me->lid, me->qpn, me->psn);
	for (int i = 0; i < 16; i++)
		len += snprintf(msg + len, sizeof msg - (size_t)len, "%02x", g[i]);
	CHECK(write(fd, msg, sizeof msg) == (ssize_t)sizeof msg, "write the exchange");
	read_all(fd, msg, sizeof msg);
	struct dest rem;
	CHECK(sscanf(msg, "%x:%x:%x:", &rem.lid, &rem.qpn, &rem.psn) == 3, "bad exchange: %s", msg);
	for (int i = 0; i < 16; i++) {
		unsigned byte;
		CHECK(sscanf(msg + 19 + 2 * i, "%2x", &byte) == 1, "bad GID in the exchange");
		rem.gid.raw[i] = (uint8_t)byte;
	}
	CHECK(write(fd, "done", sizeof "done") == (ssize_t)sizeof "done", "write done");
	return rem;
}

static void post_recv(void)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = SIZE, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = RECV_WRID, .sg_list = &sge, .num_sge = 1 }, *bad;
	CHECK(!ibv_post_recv(qp, &wr, &bad), "post_recv");
}

static void post_send(void)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf + SIZE, .length = SIZE, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = SEND_WRID, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
	CHECK(!ibv_post_send(qp, &wr, &bad), "post_send");
}

/* INIT, then RTR and RTS towards REM as ibv_rc_pingpong moves its QP. */
static void connect_qp(const struct dest *me, const struct dest *rem, int gid_index)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
				 .dest_qp_num = (uint32_t)rem->qpn, .rq_psn = (uint32_t)rem->psn,
				 .max_dest_rd_atomic = 1, .min_rnr_timer = 12 };
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.dgid = rem->gid;
	a.ah_attr.grh.sgid_index = (uint8_t)gid_index;
	a.ah_attr.grh.hop_limit = 1;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER), "RTR");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS; a.timeout = 14; a.retry_cnt = 7; a.rnr_retry = 7;
	a.sq_psn = (uint32_t)me->psn; a.max_rd_atomic = 1;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC), "RTS");
}

int main(int argc, char **argv)
{
	CHECK(argc == 6, "usage: exit_after_poll DEVICE GID_INDEX PORT SERVER ITERS");
	int gid_index = atoi(argv[2]), iters = atoi(argv[5]);
	CHECK(iters > 0 && iters < RX_DEPTH, "ITERS: 1 to %d", RX_DEPTH - 1);
	struct ibv_context *ctx = open_device_named(argv[1]);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd, "alloc_pd");
	buf = calloc(2, SIZE);
	mr = ibv_reg_mr(pd, buf, 2 * SIZE, IBV_ACCESS_LOCAL_WRITE);
	CHECK(buf && mr, "reg_mr");
	struct ibv_cq *cq = ibv_create_cq(ctx, RX_DEPTH + 1, NULL, NULL, 0);
	CHECK(cq, "create_cq");
	struct ibv_qp_init_attr init = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = RX_DEPTH, .max_send_sge = 1, .max_recv_sge = 1 } };
	qp = ibv_create_qp(pd, &init);
	CHECK(qp, "create_qp");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
	      "INIT");
	/* Every receive is posted before the exchange, as ibv_rc_pingpong does. */
	for (int i = 0; i < iters; i++)
		post_recv();

	struct ibv_port_attr port;
	CHECK(!ibv_query_port(ctx, 1, &port), "query_port");
	srand48(getpid());
	struct dest me = { .lid = port.lid, .qpn = (int)qp->qp_num, .psn = (int)(lrand48() & 0xffffff) };
	CHECK(!ibv_query_gid(ctx, 1, gid_index, &me.gid), "query_gid %d", gid_index);
	int fd = tcp_connect(argv[4], argv[3]);
	struct dest rem = exchange(fd, &me);
	connect_qp(&me, &rem, gid_index);

	post_send();
	int scnt = 0, rcnt = 0, pending = RECV_WRID | SEND_WRID;
	while (scnt < iters || rcnt < iters) {
		struct ibv_wc wc[2];
		int n = ibv_poll_cq(cq, 2, wc);
		CHECK(n >= 0, "poll_cq");
		for (int i = 0; i < n; i++) {
			CHECK(wc[i].status == IBV_WC_SUCCESS, "%s for wr_id %d",
			      ibv_wc_status_str(wc[i].status), (int)wc[i].wr_id);
			if (wc[i].wr_id == RECV_WRID)
				rcnt++;
			else
				scnt++;
			pending &= ~(int)wc[i].wr_id;
		}
		if (scnt < iters && !pending) {
			post_send();
			pending = RECV_WRID | SEND_WRID;
		}
	}
	printf("%d iters, exiting right after the last poll\n", iters);
	exit(0);
}
