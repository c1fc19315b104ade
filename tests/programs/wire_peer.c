/* The verbs side of tests/programs/wire_peer.py, which plays a RoCEv2 peer
 * written with scapy (not softverbs) on the other end of a UDP socket.
 *
 * Usage: wire_peer PEER_UD_QPN PEER_RC_QPN. It opens softverbs0, makes a
 * UD QP and an RC QP connected to the peer's RC QPN, registers a buffer
 * the peer may write, prints
 *   ready ud_qpn=N rc_qpn=N va=0x.. rkey=0x.. qkey=0x.. rq_psn=N sq_psn=N
 * and then obeys one command per stdin line, answering with one line:
 *   send_ud LEN IMM        UD SEND_WITH_IMM of LEN pattern bytes to the
 *                          peer's UD QPN, imm_data = htonl(IMM)
 *   write_rc LEN IMM VA RKEY  RC RDMA_WRITE_WITH_IMM of LEN pattern bytes
 *   recv                   waits for one receive completion and prints
 *                          it, imm as ntohl(wc.imm_data), and for UD the
 *                          payload after the 40-byte GRH in hex
 *   dump OFF LEN           the registered buffer's bytes, in hex
 *   quit
 * The pattern byte i is (i * 7 + 3) & 0xff. A wait for a completion is
 * bounded by a deadline (no sleeps); a missed one prints "timeout". */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>
#include "test_util.h"

#define QKEY 0x11111111u
#define RQ_PSN 0x1000u
#define SQ_PSN 0x2000u
#define GRH_LEN 40
#define BUF_LEN 65536
#define RECV_LEN 8192		/* the receive area at the start of buf */
#define SEND_OFF 16384		/* where sent bytes come from */
#define WAIT_S 10

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *send_cq, *recv_cq;
static struct ibv_mr *mr;
static struct ibv_qp *ud, *rc;
static struct ibv_ah *peer_ah;
static union ibv_gid gid;
static uint32_t peer_ud_qpn;
static uint8_t *buf;

/* The peer's GID: the IPv4-mapped GID of its address (argv[3]). */
static union ibv_gid peer_gid;

static struct ibv_ah_attr peer_route(void)
{
	struct ibv_ah_attr ah = { .is_global = 1, .port_num = 1 };
	ah.grh.dgid = peer_gid;
	ah.grh.hop_limit = 64;
	return ah;
}

static struct ibv_qp *new_qp(enum ibv_qp_type type)
{
	struct ibv_qp_init_attr qa = { .send_cq = send_cq, .recv_cq = recv_cq,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = type };
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	CHECK(qp, "create_qp type %d", type);
	return qp;
}

static void ud_to_rts(void)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY };
	CHECK(!ibv_modify_qp(ud, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY), "UD INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	CHECK(!ibv_modify_qp(ud, &a, IBV_QP_STATE), "UD RTR");
	a.qp_state = IBV_QPS_RTS; a.sq_psn = SQ_PSN;
	CHECK(!ibv_modify_qp(ud, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), "UD RTS");
}

static void rc_to_rts(uint32_t peer_rc_qpn)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE };
	CHECK(!ibv_modify_qp(rc, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
	      "RC INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = peer_rc_qpn;
	a.rq_psn = RQ_PSN; a.min_rnr_timer = 1; a.max_dest_rd_atomic = 1; a.ah_attr = peer_route();
	CHECK(!ibv_modify_qp(rc, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER), "RC RTR");
	memset(&a, 0, sizeof(a));
	/* timeout 18: about a second before a resend, plenty for the peer. */
	a.qp_state = IBV_QPS_RTS; a.sq_psn = SQ_PSN; a.timeout = 18; a.retry_cnt = 7; a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	CHECK(!ibv_modify_qp(rc, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			     IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC), "RC RTS");
}

static void post_recv(struct ibv_qp *qp)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = RECV_LEN, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = qp->qp_num, .sg_list = &sge, .num_sge = 1 }, *bad;
	CHECK(!ibv_post_recv(qp, &wr, &bad), "post_recv");
}

static void setup(uint32_t peer_rc_qpn)
{
	ctx = open_device_named("softverbs0");
	CHECK(ctx, "open softverbs0");
	CHECK(!ibv_query_gid(ctx, 1, 0, &gid), "query_gid");
	pd = ibv_alloc_pd(ctx);
	send_cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	recv_cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	buf = calloc(1, BUF_LEN);
	CHECK(pd && send_cq && recv_cq && buf, "pd, cqs, buffer");
	mr = ibv_reg_mr(pd, buf, BUF_LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(mr, "reg_mr");
	ud = new_qp(IBV_QPT_UD);
	rc = new_qp(IBV_QPT_RC);
	ud_to_rts();
	rc_to_rts(peer_rc_qpn);
	struct ibv_ah_attr ah = peer_route();
	peer_ah = ibv_create_ah(pd, &ah);
	CHECK(peer_ah, "create_ah");
	post_recv(ud);
	post_recv(rc);
	for (int i = 0; i < BUF_LEN - SEND_OFF; i++)
		buf[SEND_OFF + i] = (uint8_t)(i * 7 + 3);
}

/* Polls cq until one completion or WAIT_S seconds; 1 if one came. */
static int wait_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);
		CHECK(n >= 0, "poll_cq");
		if (n == 1)
			return 1;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec >= WAIT_S)
			return 0;
	}
}

static void post_send_and_report(const char *name, struct ibv_qp *qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	struct ibv_wc wc;
	CHECK(!ibv_post_send(qp, wr, &bad), "post_send %s", name);
	if (!wait_one(send_cq, &wc))
		printf("%s timeout\n", name);
	else
		printf("%s status=%s\n", name, ibv_wc_status_str(wc.status));
}

static void send_ud(uint32_t len, uint32_t imm)
{
	struct ibv_sge sge = { .addr = (uintptr_t)(buf + SEND_OFF), .length = len, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM,
		.send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(imm) };
	wr.wr.ud.ah = peer_ah; wr.wr.ud.remote_qpn = peer_ud_qpn; wr.wr.ud.remote_qkey = QKEY;
	post_send_and_report("send_ud", ud, &wr);
}

static void write_rc(uint32_t len, uint32_t imm, uint64_t va, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)(buf + SEND_OFF), .length = len, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
		.send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(imm) };
	wr.wr.rdma.remote_addr = va; wr.wr.rdma.rkey = rkey;
	post_send_and_report("write_rc", rc, &wr);
}

static void print_hex(const uint8_t *p, uint32_t len)
{
	for (uint32_t i = 0; i < len; i++)
		printf("%02x", p[i]);
}

static void recv_one(void)
{
	struct ibv_wc wc;
	if (!wait_one(recv_cq, &wc)) {
		printf("recv timeout\n");
		return;
	}
	int is_ud = wc.qp_num == ud->qp_num;
	printf("recv status=%s opcode=%s with_imm=%d imm=0x%08x qp=%s src_qp=%u byte_len=%u data=",
	       ibv_wc_status_str(wc.status),
	       wc.opcode == IBV_WC_RECV ? "RECV" : wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM ? "RECV_RDMA_WITH_IMM" : "other",
	       !!(wc.wc_flags & IBV_WC_WITH_IMM), ntohl(wc.imm_data), is_ud ? "ud" : "rc", wc.src_qp, wc.byte_len);
	if (is_ud && wc.status == IBV_WC_SUCCESS && wc.byte_len >= GRH_LEN && wc.byte_len <= RECV_LEN)
		print_hex(buf + GRH_LEN, wc.byte_len - GRH_LEN);
	printf("\n");
	post_recv(is_ud ? ud : rc);
}

static void dump(uint32_t off, uint32_t len)
{
	CHECK(off <= BUF_LEN && len <= BUF_LEN - off, "dump out of the buffer");
	printf("dump ");
	print_hex(buf + off, len);
	printf("\n");
}

int main(int argc, char **argv)
{
	CHECK(argc == 4, "usage: wire_peer PEER_UD_QPN PEER_RC_QPN PEER_IPV4");
	memset(&peer_gid, 0, sizeof(peer_gid));
	peer_gid.raw[10] = peer_gid.raw[11] = 0xff;
	CHECK(inet_pton(AF_INET, argv[3], &peer_gid.raw[12]) == 1, "bad peer address %s", argv[3]);
	peer_ud_qpn = (uint32_t)strtoul(argv[1], NULL, 0);
	setup((uint32_t)strtoul(argv[2], NULL, 0));
	printf("ready ud_qpn=%u rc_qpn=%u va=0x%llx rkey=0x%x qkey=0x%x rq_psn=%u sq_psn=%u\n",
	       ud->qp_num, rc->qp_num, (unsigned long long)(uintptr_t)buf, mr->rkey, QKEY, RQ_PSN, SQ_PSN);
	fflush(stdout);
	char line[256];
	while (fgets(line, sizeof(line), stdin)) {
		unsigned long long va;
		unsigned len, imm, rkey, off;
		if (sscanf(line, "send_ud %u %x", &len, &imm) == 2 && len <= RECV_LEN)
			send_ud(len, imm);
		else if (sscanf(line, "write_rc %u %x %llx %x", &len, &imm, &va, &rkey) == 4 &&
			 len <= BUF_LEN - SEND_OFF)
			write_rc(len, imm, va, rkey);
		else if (!strcmp(line, "recv\n"))
			recv_one();
		else if (sscanf(line, "dump %u %u", &off, &len) == 2)
			dump(off, len);
		else if (!strcmp(line, "quit\n"))
			break;
		else
			CHECK(0, "unknown command: %s", line);
		fflush(stdout);
	}
	return 0;
}
