/* UD multicast between two processes over softverbs, and the attach rules.
 *   mcast recv GROUP   attaches a UD QP to multicast GROUP (IPv4, or IPv6 as an
 *                      InfiniBand MGID), prints
 *                      "ready", receives 3 datagrams (checks payload, source
 *                      QP, GRH destination), checks destroy-while-attached
 *                      (EBUSY, seed 002) and the other attach errors, prints
 *                      "mcast recv ok";
 *   mcast send GROUP   sends 3 datagrams to GROUP (QPN 0xFFFFFF), prints
 *                      "mcast send ok";
 *   mcast quiet GROUP  attaches as recv does, prints "ready", waits for a
 *                      line on standard input (sent once the others are
 *                      done), then checks that nothing arrived and prints
 *                      "mcast quiet ok": a device on another interface
 *                      than the one the group's datagrams came in by
 *                      receives none of them, as a NIC's port.
 * Both run on softverbs0, or on DEVICE with source GID index GID_INDEX when
 * given (mcast recv|send GROUP DEVICE GID_INDEX: the interop tests run it
 * on the kernel's rxe too). */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>
#include "test_util.h"

#define QKEY 0x11111111
#define COUNT 3
#define LEN 64

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static char buf[COUNT * (LEN + 40)];
static struct ibv_mr *mr;

static const char *device_name = "softverbs0";
static int gid_index;

static struct ibv_qp *qp_of(enum ibv_qp_type type)
{
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .qp_type = type,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	CHECK(qp, "create_qp");
	return qp;
}

static void ud_to_rts(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY };
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY), "INIT");
	a.qp_state = IBV_QPS_RTR;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE), "RTR");
	a.qp_state = IBV_QPS_RTS; a.sq_psn = 1;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), "RTS");
}

/* The GID of an address: IPv4-mapped for IPv4, the address for IPv6. */
static union ibv_gid group_gid(const char *group)
{
	union ibv_gid g;
	memset(&g, 0, sizeof(g));
	if (inet_pton(AF_INET6, group, g.raw) == 1)
		return g;
	g.raw[10] = g.raw[11] = 0xff;
	CHECK(inet_pton(AF_INET, group, &g.raw[12]) == 1, "bad group %s", group);
	return g;
}

/* Whether the GRH a receive WR starts with names `g` as its destination:
 * RoCEv2 over IPv4 puts the IPv4 header in the GRH's last 20 bytes. An
 * IPv6 group sent from an IPv4 device (an InfiniBand-style MGID) travels
 * as an IPv4 group of 239/8 derived from it (softverbs' gid_route.rs). */
static int grh_names(const unsigned char *grh, const union ibv_gid *g)
{
	static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	int ipv4 = grh[20] >> 4 == 4;
	if (!memcmp(g->raw, mapped, 12))
		return ipv4 && !memcmp(grh + 36, &g->raw[12], 4);
	if (ipv4)
		return grh[36] == 239;
	return !memcmp(grh + 24, g->raw, 16);
}

static struct ibv_wc wait_wc(void)
{
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n >= 0, "poll_cq");
		if (n)
			return wc;
		clock_gettime(CLOCK_MONOTONIC, &now);
		CHECK(now.tv_sec - start.tv_sec < 20, "no completion within 20 s");
	}
}

/* A UD QP with COUNT receives posted, attached to `g`; prints "ready". */
static struct ibv_qp *attached_qp(const union ibv_gid *g)
{
	struct ibv_qp *qp = qp_of(IBV_QPT_UD);
	ud_to_rts(qp);
	for (int i = 0; i < COUNT; i++) {
		struct ibv_sge s = { (uintptr_t)buf + i * (LEN + 40), LEN + 40, mr->lkey };
		struct ibv_recv_wr w = { .wr_id = i, .sg_list = &s, .num_sge = 1 }, *bad;
		CHECK(!ibv_post_recv(qp, &w, &bad), "post_recv");
	}
	CHECK(!ibv_attach_mcast(qp, g, 0), "attach_mcast: %s", strerror(errno));
	printf("ready\n");
	fflush(stdout);
	return qp;
}

static void receive(const char *group)
{
	union ibv_gid g = group_gid(group);
	struct ibv_qp *qp = attached_qp(&g);
	for (int i = 0; i < COUNT; i++) {
		struct ibv_wc wc = wait_wc();
		CHECK(wc.status == IBV_WC_SUCCESS, "recv status %s", ibv_wc_status_str(wc.status));
		CHECK(wc.byte_len == LEN + 40, "byte_len %u", wc.byte_len);
		CHECK(wc.wc_flags & IBV_WC_GRH, "no GRH");
		const unsigned char *p = (unsigned char *)buf + wc.wr_id * (LEN + 40);
		CHECK(grh_names(p, &g), "GRH destination is not the group");
		for (int k = 0; k < LEN; k++)
			CHECK(p[40 + k] == (unsigned char)(k + 7), "payload byte %d", k);
	}
	/* The attach rules. */
	CHECK(ibv_destroy_qp(qp) == EBUSY, "destroy_qp while attached: not EBUSY");
	CHECK(!ibv_attach_mcast(qp, &g, 0), "a second attach is a no-op");
	union ibv_gid unicast = group_gid("10.1.2.3");
	CHECK(ibv_attach_mcast(qp, &unicast, 0) == EINVAL, "attach to a unicast GID: not EINVAL");
	struct ibv_qp *rc = qp_of(IBV_QPT_RC);
	CHECK(ibv_attach_mcast(rc, &g, 0) == EINVAL, "attach of an RC QP: not EINVAL");
	CHECK(ibv_detach_mcast(rc, &g, 0) == EINVAL, "detach of a QP not attached: not EINVAL");
	CHECK(!ibv_detach_mcast(qp, &g, 0), "detach_mcast");
	CHECK(!ibv_destroy_qp(qp) && !ibv_destroy_qp(rc), "destroy once detached");
	printf("mcast recv ok\n");
}

static void stay_quiet(const char *group)
{
	union ibv_gid g = group_gid(group);
	struct ibv_qp *qp = attached_qp(&g);
	char line[16];
	CHECK(fgets(line, sizeof line, stdin), "no go-ahead on standard input");
	struct ibv_wc wc;
	int n = ibv_poll_cq(cq, 1, &wc);
	CHECK(n == 0, "a datagram to the group came in by another interface (%d)", n);
	CHECK(!ibv_detach_mcast(qp, &g, 0) && !ibv_destroy_qp(qp), "detach, destroy");
	printf("mcast quiet ok\n");
}

static void send_to(const char *group)
{
	struct ibv_qp *qp = qp_of(IBV_QPT_UD);
	ud_to_rts(qp);
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1 };
	aa.grh.dgid = group_gid(group);
	aa.grh.sgid_index = gid_index;
	aa.grh.hop_limit = 1;
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	CHECK(ah, "create_ah");
	for (int k = 0; k < LEN; k++)
		buf[k] = (char)(k + 7);
	for (int i = 0; i < COUNT; i++) {
		struct ibv_sge s = { (uintptr_t)buf, LEN, mr->lkey };
		struct ibv_send_wr w = { .wr_id = i, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED }, *bad;
		w.wr.ud.ah = ah; w.wr.ud.remote_qpn = 0xffffff; w.wr.ud.remote_qkey = QKEY;
		CHECK(!ibv_post_send(qp, &w, &bad), "post_send");
		struct ibv_wc wc = wait_wc();
		CHECK(wc.status == IBV_WC_SUCCESS, "send status %s", ibv_wc_status_str(wc.status));
	}
	printf("mcast send ok\n");
}

int main(int argc, char **argv)
{
	CHECK(argc == 3 || argc == 5, "usage: mcast recv|send|quiet GROUP [DEVICE GID_INDEX]");
	if (argc == 5) {
		device_name = argv[3];
		gid_index = atoi(argv[4]);
	}
	ctx = open_device_named(device_name);
	CHECK(ctx, "open");
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(pd && cq && mr, "pd, cq, mr");
	if (!strcmp(argv[1], "recv"))
		receive(argv[2]);
	else if (!strcmp(argv[1], "quiet"))
		stay_quiet(argv[2]);
	else
		send_to(argv[2]);
	return 0;
}
