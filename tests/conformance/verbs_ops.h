/* The verbs of the differential conformance runner (docs/conformance.md,
 * "Differential runs"), one C function per verb. Each takes its arguments
 * as an array of integers, calls libibverbs on the device opened by
 * ops_open, and prints one answer line: "ok" and the values the verb
 * returned, or "err ERRNO". Objects are named by their creation index per
 * kind (the n-th PD made is PD n); a failed creation takes no index.
 *
 * Two programs include this file: verbs_exec.c, which reads one verb per
 * line from standard input (the runner's backend), and the reproducers
 * `softverbs conformance` prints, which call the same functions in order.
 * So a reproducer runs exactly what the runner ran. */
#ifndef SOFTVERBS_VERBS_OPS_H
#define SOFTVERBS_VERBS_OPS_H

#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#define OPS_MAX_OBJ 4096
#define OPS_MR_LEN 4096
#define OPS_MAX_SGE 64

typedef long long arg_t;

static struct ibv_context *ops_ctx;
static struct ibv_pd *ops_pd[OPS_MAX_OBJ];
static struct ibv_cq *ops_cq[OPS_MAX_OBJ];
static struct ibv_ah *ops_ah[OPS_MAX_OBJ];
static struct ibv_srq *ops_srq[OPS_MAX_OBJ];
static struct ibv_qp *ops_qp[OPS_MAX_OBJ];
/* An MR's buffer and keys outlive it: a WR may name a deregistered MR's
 * key, which is only a number. */
static struct { struct ibv_mr *mr; char *buf; uint32_t lkey; } ops_mr[OPS_MAX_OBJ];
static int ops_n_pd, ops_n_cq, ops_n_ah, ops_n_srq, ops_n_qp, ops_n_mr;
/* The device's GID 0 on port 1. Lines name it as ::1 (a GID no RoCE
 * device has), so one line means "this device itself" on every device:
 * an address a kernel resolves at once, where a made-up one costs a
 * neighbour lookup that takes seconds to fail. */
static union ibv_gid ops_own_gid;
static const uint8_t ops_self[16] = { [15] = 1 };

static void ops_err(int e) { printf("err %d\n", e); }

/* A verb's int result: 0, an errno, or -1 with errno set. */
static void ops_result(int rc)
{
	if (rc == 0)
		printf("ok\n");
	else
		ops_err(rc < 0 ? errno : rc);
}

/* The object at `i` of `table` (n made so far), or NULL. */
static void *ops_get(void **table, int n, arg_t i)
{
	return i >= 0 && i < n ? table[i] : NULL;
}
#define OPS_GET(kind, i) ops_get((void **)ops_##kind, ops_n_##kind, (i))
/* A bad index is the runner's mistake, never the device's: say so. */
#define OPS_NEED(p, what) do { if (!(p)) { printf("bad %s index\n", what); return; } } while (0)

static int ops_index(void **table, int n, const void *p)
{
	for (int i = 0; i < n; i++)
		if (p && table[i] == p)
			return i;
	return -1;
}

static int ops_open(const char *name)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list)
		return -1;
	for (int i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ops_ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!ops_ctx || ibv_query_gid(ops_ctx, 1, 0, &ops_own_gid))
		return -1;
	/* Events are read without blocking: "events" takes what is there. */
	int flags = fcntl(ops_ctx->async_fd, F_GETFL);
	return fcntl(ops_ctx->async_fd, F_SETFL, flags | O_NONBLOCK);
}

/* device: the limits the runner keeps its values within. */
static void op_device(const arg_t *a)
{
	(void)a;
	struct ibv_device_attr d;
	struct ibv_port_attr p;
	int rc = ibv_query_device(ops_ctx, &d);
	if (!rc)
		rc = ibv_query_port(ops_ctx, 1, &p);
	if (rc) {
		ops_result(rc);
		return;
	}
	printf("ok %d %d %d %d %d %d %d %d %d %d\n", d.max_qp_wr, d.max_sge, d.max_cqe,
	       d.max_srq_wr, d.max_srq_sge, d.max_qp_rd_atom, d.max_qp_init_rd_atom,
	       d.phys_port_cnt, p.gid_tbl_len, p.pkey_tbl_len);
}

static void op_pd(const arg_t *a)
{
	(void)a;
	struct ibv_pd *pd = ibv_alloc_pd(ops_ctx);
	if (!pd || ops_n_pd == OPS_MAX_OBJ) {
		ops_err(pd ? ENOMEM : errno);
		return;
	}
	ops_pd[ops_n_pd++] = pd;
	printf("ok\n");
}

/* dealloc_pd PD */
static void op_dealloc_pd(const arg_t *a)
{
	struct ibv_pd *pd = OPS_GET(pd, a[0]);
	OPS_NEED(pd, "pd");
	int rc = ibv_dealloc_pd(pd);
	if (!rc)
		ops_pd[a[0]] = NULL;
	ops_result(rc);
}

/* cq CQE */
static void op_cq(const arg_t *a)
{
	struct ibv_cq *cq = ibv_create_cq(ops_ctx, (int)a[0], NULL, NULL, 0);
	if (!cq || ops_n_cq == OPS_MAX_OBJ) {
		ops_err(cq ? ENOMEM : errno);
		return;
	}
	ops_cq[ops_n_cq++] = cq;
	printf("ok\n");
}

/* destroy_cq CQ */
static void op_destroy_cq(const arg_t *a)
{
	struct ibv_cq *cq = OPS_GET(cq, a[0]);
	OPS_NEED(cq, "cq");
	int rc = ibv_destroy_cq(cq);
	if (!rc)
		ops_cq[a[0]] = NULL;
	ops_result(rc);
}

/* mr PD ACCESS: a fresh 4 KiB buffer registered with ACCESS. */
static void op_mr(const arg_t *a)
{
	struct ibv_pd *pd = OPS_GET(pd, a[0]);
	OPS_NEED(pd, "pd");
	if (ops_n_mr == OPS_MAX_OBJ) {
		ops_err(ENOMEM);
		return;
	}
	char *buf = aligned_alloc(OPS_MR_LEN, OPS_MR_LEN);
	if (!buf) {
		ops_err(ENOMEM);
		return;
	}
	/* A pattern particular to this MR, so that data moved is seen. */
	for (int i = 0; i < OPS_MR_LEN; i++)
		buf[i] = (char)(i * 7 + ops_n_mr * 13);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, OPS_MR_LEN, (int)a[1]);
	if (!mr) {
		ops_err(errno);
		free(buf);
		return;
	}
	ops_mr[ops_n_mr].mr = mr;
	ops_mr[ops_n_mr].buf = buf;
	ops_mr[ops_n_mr++].lkey = mr->lkey;
	printf("ok\n");
}

/* dereg_mr MR */
static void op_dereg_mr(const arg_t *a)
{
	struct ibv_mr *mr = a[0] >= 0 && a[0] < ops_n_mr ? ops_mr[a[0]].mr : NULL;
	OPS_NEED(mr, "mr");
	int rc = ibv_dereg_mr(mr);
	if (!rc)
		ops_mr[a[0]].mr = NULL;
	ops_result(rc);
}

/* The 12 address-vector numbers of the argument and answer lines: dlid sl
 * src_path_bits static_rate is_global port_num flow_label sgid_index
 * hop_limit traffic_class dgid (high and low 64 bits, as signed numbers;
 * ::1 is the device's own GID 0, both ways). */
#define OPS_AH_ARGS 12
static void ops_ah_from(struct ibv_ah_attr *ah, const arg_t *a)
{
	memset(ah, 0, sizeof(*ah));
	ah->dlid = (uint16_t)a[0];
	ah->sl = (uint8_t)a[1];
	ah->src_path_bits = (uint8_t)a[2];
	ah->static_rate = (uint8_t)a[3];
	ah->is_global = (uint8_t)a[4];
	ah->port_num = (uint8_t)a[5];
	ah->grh.flow_label = (uint32_t)a[6];
	ah->grh.sgid_index = (uint8_t)a[7];
	ah->grh.hop_limit = (uint8_t)a[8];
	ah->grh.traffic_class = (uint8_t)a[9];
	for (int i = 0; i < 8; i++) {
		ah->grh.dgid.raw[i] = (uint8_t)((unsigned long long)a[10] >> (56 - 8 * i));
		ah->grh.dgid.raw[8 + i] = (uint8_t)((unsigned long long)a[11] >> (56 - 8 * i));
	}
	if (!memcmp(ah->grh.dgid.raw, ops_self, 16))
		ah->grh.dgid = ops_own_gid;
}

static void ops_print_ah(const struct ibv_ah_attr *ah)
{
	unsigned long long hi = 0, lo = 0;
	const uint8_t *gid = ah->grh.dgid.raw;
	if (!memcmp(gid, ops_own_gid.raw, 16))
		gid = ops_self;
	for (int i = 0; i < 8; i++) {
		hi = hi << 8 | gid[i];
		lo = lo << 8 | gid[8 + i];
	}
	/* The GID's halves as signed numbers, as the arguments carry them. */
	printf(" %u %u %u %u %u %u %u %u %u %u %lld %lld", ah->dlid, ah->sl, ah->src_path_bits,
	       ah->static_rate, ah->is_global, ah->port_num, ah->grh.flow_label,
	       ah->grh.sgid_index, ah->grh.hop_limit, ah->grh.traffic_class, (long long)hi,
	       (long long)lo);
}

/* ah PD AV(12) */
static void op_ah(const arg_t *a)
{
	struct ibv_pd *pd = OPS_GET(pd, a[0]);
	OPS_NEED(pd, "pd");
	struct ibv_ah_attr attr;
	ops_ah_from(&attr, a + 1);
	struct ibv_ah *ah = ibv_create_ah(pd, &attr);
	if (!ah || ops_n_ah == OPS_MAX_OBJ) {
		ops_err(ah ? ENOMEM : errno);
		return;
	}
	ops_ah[ops_n_ah++] = ah;
	printf("ok\n");
}

/* destroy_ah AH */
static void op_destroy_ah(const arg_t *a)
{
	struct ibv_ah *ah = OPS_GET(ah, a[0]);
	OPS_NEED(ah, "ah");
	int rc = ibv_destroy_ah(ah);
	if (!rc)
		ops_ah[a[0]] = NULL;
	ops_result(rc);
}

/* srq PD MAX_WR MAX_SGE LIMIT -> ok MAX_WR MAX_SGE (what the device gave) */
static void op_srq(const arg_t *a)
{
	struct ibv_pd *pd = OPS_GET(pd, a[0]);
	OPS_NEED(pd, "pd");
	struct ibv_srq_init_attr init = {
		.attr = { .max_wr = (uint32_t)a[1], .max_sge = (uint32_t)a[2],
			  .srq_limit = (uint32_t)a[3] },
	};
	struct ibv_srq *srq = ibv_create_srq(pd, &init);
	if (!srq || ops_n_srq == OPS_MAX_OBJ) {
		ops_err(srq ? ENOMEM : errno);
		return;
	}
	ops_srq[ops_n_srq++] = srq;
	printf("ok %u %u\n", init.attr.max_wr, init.attr.max_sge);
}

/* modify_srq SRQ MASK MAX_WR LIMIT */
static void op_modify_srq(const arg_t *a)
{
	struct ibv_srq *srq = OPS_GET(srq, a[0]);
	OPS_NEED(srq, "srq");
	struct ibv_srq_attr attr = { .max_wr = (uint32_t)a[2], .srq_limit = (uint32_t)a[3] };
	ops_result(ibv_modify_srq(srq, &attr, (int)a[1]));
}

/* query_srq SRQ -> ok MAX_WR MAX_SGE LIMIT */
static void op_query_srq(const arg_t *a)
{
	struct ibv_srq *srq = OPS_GET(srq, a[0]);
	OPS_NEED(srq, "srq");
	struct ibv_srq_attr attr;
	int rc = ibv_query_srq(srq, &attr);
	if (rc)
		ops_result(rc);
	else
		printf("ok %u %u %u\n", attr.max_wr, attr.max_sge, attr.srq_limit);
}

/* destroy_srq SRQ */
static void op_destroy_srq(const arg_t *a)
{
	struct ibv_srq *srq = OPS_GET(srq, a[0]);
	OPS_NEED(srq, "srq");
	int rc = ibv_destroy_srq(srq);
	if (!rc)
		ops_srq[a[0]] = NULL;
	ops_result(rc);
}

static void ops_print_cap(const struct ibv_qp_cap *c)
{
	printf(" %u %u %u %u %u", c->max_send_wr, c->max_recv_wr, c->max_send_sge,
	       c->max_recv_sge, c->max_inline_data);
}

/* qp PD SEND_CQ RECV_CQ SRQ(-1: none) TYPE SEND_WR RECV_WR SEND_SGE
 * RECV_SGE INLINE SQ_SIG_ALL -> ok CAPS(5) (what the device gave) */
static void op_qp(const arg_t *a)
{
	struct ibv_pd *pd = OPS_GET(pd, a[0]);
	struct ibv_cq *scq = OPS_GET(cq, a[1]), *rcq = OPS_GET(cq, a[2]);
	struct ibv_srq *srq = a[3] < 0 ? NULL : OPS_GET(srq, a[3]);
	OPS_NEED(pd && scq && rcq && (a[3] < 0 || srq), "pd, cq or srq");
	struct ibv_qp_init_attr init = {
		.send_cq = scq, .recv_cq = rcq, .srq = srq,
		.qp_type = (enum ibv_qp_type)a[4],
		.cap = { .max_send_wr = (uint32_t)a[5], .max_recv_wr = (uint32_t)a[6],
			 .max_send_sge = (uint32_t)a[7], .max_recv_sge = (uint32_t)a[8],
			 .max_inline_data = (uint32_t)a[9] },
		.sq_sig_all = (int)a[10],
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &init);
	if (!qp || ops_n_qp == OPS_MAX_OBJ) {
		ops_err(qp ? ENOMEM : errno);
		return;
	}
	ops_qp[ops_n_qp++] = qp;
	printf("ok");
	ops_print_cap(&init.cap);
	printf("\n");
}

/* The 22 numbers that precede the address vector in modify_qp's
 * arguments and query_qp's answer, in this order. */
#define OPS_QP_ARGS 22
static void ops_qp_attr_from(struct ibv_qp_attr *q, const arg_t *a)
{
	memset(q, 0, sizeof(*q));
	q->qp_state = (enum ibv_qp_state)a[0];
	q->cur_qp_state = (enum ibv_qp_state)a[1];
	q->path_mtu = (enum ibv_mtu)a[2];
	q->path_mig_state = (enum ibv_mig_state)a[3];
	q->qkey = (uint32_t)a[4];
	q->rq_psn = (uint32_t)a[5];
	q->sq_psn = (uint32_t)a[6];
	q->dest_qp_num = (uint32_t)a[7];
	q->qp_access_flags = (unsigned)a[8];
	q->pkey_index = (uint16_t)a[9];
	q->alt_pkey_index = (uint16_t)a[10];
	q->en_sqd_async_notify = (uint8_t)a[11];
	q->max_rd_atomic = (uint8_t)a[12];
	q->max_dest_rd_atomic = (uint8_t)a[13];
	q->min_rnr_timer = (uint8_t)a[14];
	q->port_num = (uint8_t)a[15];
	q->timeout = (uint8_t)a[16];
	q->retry_cnt = (uint8_t)a[17];
	q->rnr_retry = (uint8_t)a[18];
	q->alt_port_num = (uint8_t)a[19];
	q->alt_timeout = (uint8_t)a[20];
	q->rate_limit = (uint32_t)a[21];
	ops_ah_from(&q->ah_attr, a + OPS_QP_ARGS);
}

/* modify_qp QP MASK ATTR(22) AV(12) */
static void op_modify_qp(const arg_t *a)
{
	struct ibv_qp *qp = OPS_GET(qp, a[0]);
	OPS_NEED(qp, "qp");
	struct ibv_qp_attr attr;
	ops_qp_attr_from(&attr, a + 2);
	ops_result(ibv_modify_qp(qp, &attr, (int)a[1]));
}

/* query_qp QP -> ok ATTR(22) AV(12) SQ_DRAINING CAP(5) and the init
 * attributes: SEND_CQ RECV_CQ SRQ TYPE SQ_SIG_ALL CAP(5) */
static void op_query_qp(const arg_t *a)
{
	struct ibv_qp *qp = OPS_GET(qp, a[0]);
	OPS_NEED(qp, "qp");
	struct ibv_qp_attr q;
	struct ibv_qp_init_attr init;
	memset(&q, 0, sizeof(q));
	memset(&init, 0, sizeof(init));
	int rc = ibv_query_qp(qp, &q, 0x1fffff, &init);
	if (rc) {
		ops_result(rc);
		return;
	}
	printf("ok %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u %u",
	       q.qp_state, q.cur_qp_state, q.path_mtu, q.path_mig_state, q.qkey, q.rq_psn,
	       q.sq_psn, q.dest_qp_num, q.qp_access_flags, q.pkey_index, q.alt_pkey_index,
	       q.en_sqd_async_notify, q.max_rd_atomic, q.max_dest_rd_atomic, q.min_rnr_timer,
	       q.port_num, q.timeout, q.retry_cnt, q.rnr_retry, q.alt_port_num, q.alt_timeout,
	       q.rate_limit);
	ops_print_ah(&q.ah_attr);
	printf(" %u", q.sq_draining);
	ops_print_cap(&q.cap);
	printf(" %d %d %d %u %d", ops_index((void **)ops_cq, ops_n_cq, init.send_cq),
	       ops_index((void **)ops_cq, ops_n_cq, init.recv_cq),
	       ops_index((void **)ops_srq, ops_n_srq, init.srq), init.qp_type, init.sq_sig_all);
	ops_print_cap(&init.cap);
	printf("\n");
}

/* destroy_qp QP */
static void op_destroy_qp(const arg_t *a)
{
	struct ibv_qp *qp = OPS_GET(qp, a[0]);
	OPS_NEED(qp, "qp");
	int rc = ibv_destroy_qp(qp);
	if (!rc)
		ops_qp[a[0]] = NULL;
	ops_result(rc);
}

/* The SGE list of a receive WR: N, then N times MR OFFSET LENGTH KEY,
 * where OFFSET is from the MR's buffer and KEY is -1 for the MR's lkey,
 * else the key itself. MR -1 means address OFFSET, no buffer. */
static int ops_sges(struct ibv_sge *sge, const arg_t *a)
{
	int n = (int)a[0];
	if (n < 0 || n > OPS_MAX_SGE)
		return -1;
	for (int i = 0; i < n; i++) {
		const arg_t *s = a + 1 + 4 * i;
		int mr = (int)s[0];
		if (mr >= ops_n_mr)
			return -1;
		uintptr_t base = mr < 0 ? 0 : (uintptr_t)ops_mr[mr].buf;
		sge[i].addr = base + (uint64_t)s[1];
		sge[i].length = (uint32_t)s[2];
		sge[i].lkey = s[3] < 0 && mr >= 0 ? ops_mr[mr].lkey : (uint32_t)s[3];
	}
	return n;
}

/* post_recv QP WR_ID SGES */
static void op_post_recv(const arg_t *a)
{
	struct ibv_qp *qp = OPS_GET(qp, a[0]);
	OPS_NEED(qp, "qp");
	struct ibv_sge sge[OPS_MAX_SGE];
	int n = ops_sges(sge, a + 2);
	OPS_NEED(n >= 0, "sge");
	struct ibv_recv_wr wr = { .wr_id = (uint64_t)a[1], .sg_list = sge, .num_sge = n }, *bad;
	ops_result(ibv_post_recv(qp, &wr, &bad));
}

/* post_srq_recv SRQ WR_ID SGES */
static void op_post_srq_recv(const arg_t *a)
{
	struct ibv_srq *srq = OPS_GET(srq, a[0]);
	OPS_NEED(srq, "srq");
	struct ibv_sge sge[OPS_MAX_SGE];
	int n = ops_sges(sge, a + 2);
	OPS_NEED(n >= 0, "sge");
	struct ibv_recv_wr wr = { .wr_id = (uint64_t)a[1], .sg_list = sge, .num_sge = n }, *bad;
	ops_result(ibv_post_srq_recv(srq, &wr, &bad));
}

static double ops_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Polls CQ for up to MAX completions, going on until WANT came or
 * `seconds` passed, and prints them: "ok N", then N lines "wc WR_ID
 * STATUS OPCODE BYTE_LEN IMM FLAGS QP SRC_QP" (QP as an index). */
static void ops_poll(const arg_t *a, double seconds)
{
	struct ibv_cq *cq = OPS_GET(cq, a[0]);
	OPS_NEED(cq, "cq");
	int max = a[1] > 1024 ? 1024 : (int)a[1], want = a[2] < max ? (int)a[2] : max, got = 0;
	struct ibv_wc wc[1024];
	double until = ops_now() + seconds;
	for (;;) {
		int n = ibv_poll_cq(cq, max - got, wc + got);
		if (n < 0) {
			ops_err(EIO);
			return;
		}
		got += n;
		if (got >= want || got == max || ops_now() > until)
			break;
		if (n == 0) {
			struct timespec pause = { 0, 1000000 };
			nanosleep(&pause, NULL); /* a bounded wait for a condition, not a delay */
		}
	}
	printf("ok %d\n", got);
	for (int i = 0; i < got; i++) {
		struct ibv_qp *owner = NULL;
		for (int q = 0; q < ops_n_qp; q++)
			if (ops_qp[q] && ops_qp[q]->qp_num == wc[i].qp_num)
				owner = ops_qp[q];
		printf("wc %llu %u %u %u %u %u %d %u\n", (unsigned long long)wc[i].wr_id,
		       wc[i].status, wc[i].status ? 0 : wc[i].opcode, wc[i].byte_len,
		       wc[i].imm_data, wc[i].wc_flags, ops_index((void **)ops_qp, ops_n_qp, owner),
		       wc[i].src_qp);
	}
}

/* poll_cq CQ MAX WANT: a device may complete asynchronously (a kernel
 * provider flushes a QP's WRs from a work queue), so this waits up to
 * 2 s for WANT completions. */
static void op_poll_cq(const arg_t *a)
{
	ops_poll(a, 2);
}

/* wait_cq CQ MAX WANT: as poll_cq, for the data path, where WANT
 * completions are owed (every WR posted completes once): up to 20 s. */
static void op_wait_cq(const arg_t *a)
{
	ops_poll(a, 20);
}

/* connect QP PEER: moves an RC or UC QP from RESET to RTS, connected to
 * QP PEER of this device through the device's own GID 0 (path MTU 1024,
 * PSNs 0, every remote access allowed, 4 RD atomics each way, no RNR
 * retry so a SEND without a receive WR fails at once, timeout 14 and 3
 * retries: rxe takes a retry_cnt of 7 as "for ever", so a SEND to a peer
 * in ERR would never complete there). */
static void op_connect(const arg_t *a)
{
	struct ibv_qp *qp = OPS_GET(qp, a[0]), *peer = OPS_GET(qp, a[1]);
	OPS_NEED(qp && peer, "qp");
	struct ibv_qp_attr at = {
		.qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
	};
	int rc = ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				     IBV_QP_ACCESS_FLAGS);
	if (!rc) {
		memset(&at, 0, sizeof(at));
		at.qp_state = IBV_QPS_RTR;
		at.path_mtu = IBV_MTU_1024;
		at.dest_qp_num = peer->qp_num;
		at.max_dest_rd_atomic = 4;
		at.min_rnr_timer = 1;
		at.ah_attr.is_global = 1;
		at.ah_attr.port_num = 1;
		at.ah_attr.grh.dgid = ops_own_gid;
		at.ah_attr.grh.hop_limit = 64;
		int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
		if (qp->qp_type == IBV_QPT_RC)
			mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		rc = ibv_modify_qp(qp, &at, mask);
	}
	if (!rc) {
		memset(&at, 0, sizeof(at));
		at.qp_state = IBV_QPS_RTS;
		at.timeout = 14;
		at.retry_cnt = 3;
		at.max_rd_atomic = 4;
		int mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
		if (qp->qp_type == IBV_QPT_RC)
			mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				IBV_QP_MAX_QP_RD_ATOMIC;
		rc = ibv_modify_qp(qp, &at, mask);
	}
	ops_result(rc);
}

/* post_send QP WR_ID OPCODE LOCAL_MR OFFSET LENGTH REMOTE_MR
 * REMOTE_OFFSET RKEY IMM SGES: one signaled WR of `enum ibv_wr_opcode`
 * OPCODE gathering LENGTH bytes (none if 0) of LOCAL_MR's buffer, cut
 * into SGES pieces in order (at most one per byte; the last takes what
 * the others leave),
 * aimed at REMOTE_MR's buffer with RKEY (-1: the MR's rkey). IMM is the
 * immediate data, and for atomics the compare/add operand (swap: IMM + 1). */
static void op_post_send(const arg_t *a)
{
	struct ibv_qp *qp = OPS_GET(qp, a[0]);
	OPS_NEED(qp, "qp");
	OPS_NEED(a[3] >= 0 && a[3] < ops_n_mr && a[6] >= 0 && a[6] < ops_n_mr, "mr");
	OPS_NEED(a[10] >= 1 && a[10] <= OPS_MAX_SGE, "sges");
	struct ibv_sge sge[OPS_MAX_SGE];
	/* No piece is empty: at most one per byte. */
	int pieces = a[5] < a[10] ? (int)a[5] : (int)a[10];
	uint32_t each = pieces ? (uint32_t)a[5] / (uint32_t)pieces : 0;
	for (int i = 0; i < pieces; i++) {
		sge[i].addr = (uintptr_t)ops_mr[a[3]].buf + (uint64_t)a[4] + (uint64_t)i * each;
		sge[i].length = i + 1 < pieces ? each : (uint32_t)a[5] - each * (uint32_t)i;
		sge[i].lkey = ops_mr[a[3]].lkey;
	}
	struct ibv_mr *remote = ops_mr[a[6]].mr;
	struct ibv_send_wr wr = {
		.wr_id = (uint64_t)a[1], .sg_list = sge, .num_sge = pieces,
		.opcode = (enum ibv_wr_opcode)a[2], .send_flags = IBV_SEND_SIGNALED,
		.imm_data = htonl((uint32_t)a[9]),
	}, *bad;
	uint64_t raddr = (uintptr_t)ops_mr[a[6]].buf + (uint64_t)a[7];
	uint32_t rkey = a[8] < 0 ? (remote ? remote->rkey : 0) : (uint32_t)a[8];
	if (wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = (uint64_t)a[9];
		wr.wr.atomic.swap = (uint64_t)a[9] + 1;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	ops_result(ibv_post_send(qp, &wr, &bad));
}

/* barrier QP PEER MR: an RDMA WRITE of 8 bytes from MR's first 8 to its
 * next 8, posted on QP (connected to QP PEER) after its other WRs, whose
 * completions were all taken. A UC or RC QP's peer takes its messages in
 * order, so once these bytes have landed the peer has taken every earlier
 * one: what an unreliable transport delivered is then known without
 * waiting for a time. Waits up to 20 s for the bytes and the WR's
 * completion (wr_id UINT64_MAX, on the QP's send CQ). Prints "ok", "ok
 * unsent STATUS" when the WR did not go (its completion's status; a QP in
 * an error state flushes it), "ok peer in error" when the peer entered
 * ERR (it takes nothing more, so what it took is known too), or "err
 * 110" if the bytes never landed. */
static void op_barrier(const arg_t *a)
{
	static uint64_t marker = 0x6261727269657200ULL; /* "barrier" */
	struct ibv_qp *qp = OPS_GET(qp, a[0]), *peer = OPS_GET(qp, a[1]);
	OPS_NEED(qp && peer && a[2] >= 0 && a[2] < ops_n_mr, "qp or mr");
	char *buf = ops_mr[a[2]].buf;
	uint64_t want = ++marker;
	memcpy(buf, &want, sizeof(want));
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 8, .lkey = ops_mr[a[2]].lkey };
	struct ibv_send_wr wr = {
		.wr_id = UINT64_MAX, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED,
	}, *bad;
	wr.wr.rdma.remote_addr = (uintptr_t)buf + 8;
	wr.wr.rdma.rkey = ops_mr[a[2]].mr->rkey;
	int rc = ibv_post_send(qp, &wr, &bad);
	if (rc) {
		ops_err(rc);
		return;
	}
	struct ibv_wc wc;
	int got = 0;
	double until = ops_now() + 20;
	while (!got && ops_now() < until)
		got = ibv_poll_cq(qp->send_cq, 1, &wc);
	if (got < 0 || (got == 1 && wc.wr_id != UINT64_MAX)) {
		ops_err(got < 0 ? EIO : EPROTO); /* the precondition did not hold */
		return;
	}
	if (got == 1 && wc.status != IBV_WC_SUCCESS) {
		printf("ok unsent %u\n", wc.status);
		return;
	}
	/* The device writes it: read it anew each time (the buffer is page
	 * aligned, so these 8 bytes are too). */
	volatile uint64_t *landed = (volatile uint64_t *)(buf + 8);
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;
	while (*landed != want && ops_now() < until) {
		if (!ibv_query_qp(peer, &attr, IBV_QP_STATE, &init) && attr.qp_state == IBV_QPS_ERR) {
			printf("ok peer in error\n");
			return;
		}
	}
	if (got != 1 || *landed != want) {
		ops_err(ETIMEDOUT);
		return;
	}
	printf("ok\n");
}

/* mr_sum MR -> ok HASH: FNV-1a of the MR's buffer, to compare memory. */
static void op_mr_sum(const arg_t *a)
{
	OPS_NEED(a[0] >= 0 && a[0] < ops_n_mr, "mr");
	uint64_t h = 0xcbf29ce484222325ULL;
	const unsigned char *p = (const unsigned char *)ops_mr[a[0]].buf;
	for (int i = 0; i < OPS_MR_LEN; i++)
		h = (h ^ p[i]) * 0x100000001b3ULL;
	printf("ok %lld\n", (long long)h);
}

/* The line of one async event: "event TYPE KIND INDEX" (KIND qp, cq,
 * srq or port; INDEX the object's, or the port number). */
static void ops_event_line(char *out, size_t size, const struct ibv_async_event *e)
{
	const char *kind = "port";
	int idx = e->element.port_num;
	switch (e->event_type) {
	case IBV_EVENT_CQ_ERR:
		kind = "cq";
		idx = ops_index((void **)ops_cq, ops_n_cq, e->element.cq);
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		kind = "srq";
		idx = ops_index((void **)ops_srq, ops_n_srq, e->element.srq);
		break;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		kind = "qp";
		idx = ops_index((void **)ops_qp, ops_n_qp, e->element.qp);
		break;
	default:
		break;
	}
	snprintf(out, size, "event %d %s %d", e->event_type, kind, idx);
}

/* events WANT -> ok N, then N event lines. A kernel provider raises some
 * events from a work queue: this waits (poll on the event fd, at most
 * 2 s) until WANT events came. */
static void op_events(const arg_t *a)
{
	char lines[64][64];
	int n = 0, want = a[0] < 64 ? (int)a[0] : 64;
	double until = ops_now() + 2;
	for (;;) {
		struct ibv_async_event e;
		while (n < 64 && !ibv_get_async_event(ops_ctx, &e)) {
			ops_event_line(lines[n++], sizeof(lines[0]), &e);
			ibv_ack_async_event(&e);
		}
		double left = until - ops_now();
		if (n >= want || left <= 0)
			break;
		struct pollfd p = { .fd = ops_ctx->async_fd, .events = POLLIN };
		poll(&p, 1, (int)(left * 1000) + 1);
	}
	printf("ok %d\n", n);
	for (int i = 0; i < n; i++)
		printf("%s\n", lines[i]);
}

/* Every verb by name, with its number of fixed arguments (post_recv and
 * post_srq_recv take SGEs after them). */
static const struct ops_verb {
	const char *name;
	void (*run)(const arg_t *);
	int args;
} ops_verbs[] __attribute__((unused)) = {
	{ "device", op_device, 0 },
	{ "pd", op_pd, 0 },
	{ "dealloc_pd", op_dealloc_pd, 1 },
	{ "cq", op_cq, 1 },
	{ "destroy_cq", op_destroy_cq, 1 },
	{ "mr", op_mr, 2 },
	{ "dereg_mr", op_dereg_mr, 1 },
	{ "ah", op_ah, 1 + OPS_AH_ARGS },
	{ "destroy_ah", op_destroy_ah, 1 },
	{ "srq", op_srq, 4 },
	{ "modify_srq", op_modify_srq, 4 },
	{ "query_srq", op_query_srq, 1 },
	{ "destroy_srq", op_destroy_srq, 1 },
	{ "qp", op_qp, 11 },
	{ "modify_qp", op_modify_qp, 2 + OPS_QP_ARGS + OPS_AH_ARGS },
	{ "query_qp", op_query_qp, 1 },
	{ "destroy_qp", op_destroy_qp, 1 },
	{ "post_recv", op_post_recv, 3 },
	{ "post_srq_recv", op_post_srq_recv, 3 },
	{ "poll_cq", op_poll_cq, 3 },
	{ "wait_cq", op_wait_cq, 3 },
	{ "connect", op_connect, 2 },
	{ "post_send", op_post_send, 11 },
	{ "mr_sum", op_mr_sum, 1 },
	{ "barrier", op_barrier, 3 },
	{ "events", op_events, 1 },
};

#endif
