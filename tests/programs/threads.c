/* Several threads on one softverbs context, checking every completion.
 *
 * Shared QP: NT threads post SENDs on one RC QP (qa) and poll its send CQ
 * and the receive CQ of its peer (qb) at the same time. Even threads post
 * with ibv_post_send (lists of two WRs, resumed from bad_wr) and poll with
 * ibv_poll_cq; odd threads post with ibv_wr_start..ibv_wr_complete
 * (batches of two, retried whole when the queue is full, so a batch that
 * was partly posted shows up as a WR completed twice) and poll the send
 * CQ with ibv_start_poll..ibv_end_poll. Completions of one thread's WRs
 * are often polled by another.
 *
 * Own QPs: NP more threads at the same time each run their own QP pair of
 * the same context, posting and polling alone.
 *
 * Every send completes exactly once with IBV_WC_SUCCESS; every message is
 * received exactly once into exactly one receive buffer, with the length
 * and bytes its sender wrote. No sleeps; a deadline bounds the run.
 * Prints "threads ok". */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>
#include "test_util.h"


enum { NT = 4, N = 400, NP = 3, NB = 300, SLOT = 256, SQ_DEPTH = 16, DEADLINE_S = 25 };

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_mr *mr;
static uint8_t *mem;
static struct timespec start;

static void check_deadline(const char *what)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	CHECK(now.tv_sec - start.tv_sec < DEADLINE_S, "deadline passed in %s", what);
}

/* The message (thread or pair t, number i): its length and its bytes
 * (an 8-byte tag, then a pattern derived from it). */
static uint32_t msg_len(int t, int i) { return 16 + (uint32_t)(t * 7 + i) % (SLOT - 16); }
static uint64_t tag(int t, int i) { return (uint64_t)t << 32 | (uint32_t)i; }

static void fill(uint8_t *p, int t, int i)
{
	uint64_t g = tag(t, i);
	memcpy(p, &g, 8);
	for (uint32_t k = 8; k < msg_len(t, i); k++)
		p[k] = (uint8_t)(g * 31 + k);
}

/* Checks a received message; returns its tag. */
static uint64_t check_msg(const uint8_t *p, uint32_t byte_len, int max_t, int max_i)
{
	uint64_t g;
	memcpy(&g, p, 8);
	int t = (int)(g >> 32), i = (int)(uint32_t)g;
	CHECK(t < max_t && i < max_i, "received a bad tag %llx", (unsigned long long)g);
	CHECK(byte_len == msg_len(t, i), "byte_len %u, sent %u", byte_len, msg_len(t, i));
	for (uint32_t k = 8; k < byte_len; k++)
		CHECK(p[k] == (uint8_t)(g * 31 + k), "message %d/%d byte %u", t, i, k);
	return g;
}

/* RESET -> RTS, connected to the QP numbered `dest` of this context. */
static void connect_qp(struct ibv_qp *qp, uint32_t dest)
{
	union ibv_gid gid;
	CHECK(!ibv_query_gid(ctx, 1, 0, &gid), "query_gid");
	connect_rc(qp, dest, gid, 0, 0);
}

static struct ibv_qp *make_qp(struct ibv_cq *scq, struct ibv_cq *rcq, uint32_t recv_wr, int with_ops)
{
	struct ibv_qp_init_attr_ex a = { .send_cq = scq, .recv_cq = rcq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = SQ_DEPTH, .max_recv_wr = recv_wr, .max_send_sge = 1, .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD, .pd = pd };
	if (with_ops) {
		a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		a.send_ops_flags = IBV_QP_EX_WITH_SEND;
	}
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &a);
	CHECK(qp, "create_qp_ex: %s", strerror(errno));
	return qp;
}

/* Pre-posts `n` receives into the slots at `area` (wr_id = slot). */
static void post_receives(struct ibv_qp *qp, uint8_t *area, int n)
{
	for (int j = 0; j < n; j++) {
		struct ibv_sge s = { (uintptr_t)(area + (size_t)j * SLOT), SLOT, mr->lkey };
		struct ibv_recv_wr w = { .wr_id = (uint64_t)j, .sg_list = &s, .num_sge = 1 }, *bad;
		CHECK(!ibv_post_recv(qp, &w, &bad), "post_recv %d", j);
	}
}

/* ---- the shared QP ---------------------------------------------------- */

static struct ibv_cq_ex *a_scq;        /* qa's send CQ (extended) */
static struct ibv_cq *a_rcq;           /* qb's receive CQ */
static struct ibv_qp *qa, *qb;
static uint8_t *a_send, *a_recv;
static atomic_int a_sent_seen[NT][N], a_recv_seen[NT][N], a_slot_seen[NT * N];
static atomic_int a_send_done, a_recv_done;

static void a_send_wc(uint64_t wr_id, int status, int opcode)
{
	int t = (int)(wr_id >> 32), i = (int)(uint32_t)wr_id;
	CHECK(status == IBV_WC_SUCCESS, "send %d/%d: status %s", t, i, ibv_wc_status_str(status));
	CHECK(opcode == IBV_WC_SEND, "send opcode %d", opcode);
	CHECK(t < NT && i < N, "send completion with a bad wr_id %llx", (unsigned long long)wr_id);
	CHECK(atomic_fetch_add(&a_sent_seen[t][i], 1) == 0, "send %d/%d completed twice", t, i);
	atomic_fetch_add(&a_send_done, 1);
}

/* Polls the send CQ once, with the API this thread uses. */
static void a_poll_send(int t)
{
	if (t % 2 == 0) {
		struct ibv_wc wc[8];
		int n = ibv_poll_cq(ibv_cq_ex_to_cq(a_scq), 8, wc);
		CHECK(n >= 0, "poll_cq (send): %d", n);
		for (int k = 0; k < n; k++)
			a_send_wc(wc[k].wr_id, wc[k].status, wc[k].opcode);
		return;
	}
	struct ibv_poll_cq_attr pa = {};
	int ret = ibv_start_poll(a_scq, &pa);
	if (ret == ENOENT)
		return;
	CHECK(!ret, "start_poll: %d", ret);
	int k = 0;
	do
		a_send_wc(a_scq->wr_id, a_scq->status, ibv_wc_read_opcode(a_scq));
	while (++k < 8 && !(ret = ibv_next_poll(a_scq)));
	CHECK(!ret || ret == ENOENT, "next_poll: %d", ret);
	ibv_end_poll(a_scq);
}

static void a_poll_recv(void)
{
	struct ibv_wc wc[8];
	int n = ibv_poll_cq(a_rcq, 8, wc);
	CHECK(n >= 0, "poll_cq (recv): %d", n);
	for (int k = 0; k < n; k++) {
		CHECK(wc[k].status == IBV_WC_SUCCESS, "recv: status %s", ibv_wc_status_str(wc[k].status));
		CHECK(wc[k].opcode == IBV_WC_RECV && wc[k].qp_num == qb->qp_num, "recv opcode or qp_num");
		CHECK(wc[k].wr_id < NT * N, "recv wr_id %llu", (unsigned long long)wc[k].wr_id);
		int slot = (int)wc[k].wr_id;
		CHECK(atomic_fetch_add(&a_slot_seen[slot], 1) == 0, "receive buffer %d completed twice", slot);
		uint64_t g = check_msg(a_recv + (size_t)slot * SLOT, wc[k].byte_len, NT, N);
		CHECK(atomic_fetch_add(&a_recv_seen[g >> 32][(uint32_t)g], 1) == 0, "message received twice");
		atomic_fetch_add(&a_recv_done, 1);
	}
}

static void a_poll(int t)
{
	a_poll_send(t);
	a_poll_recv();
	check_deadline("the shared QP");
}

static struct ibv_sge a_sge(int t, int i)
{
	uint8_t *p = a_send + ((size_t)t * N + i) * SLOT;
	fill(p, t, i);
	return (struct ibv_sge){ (uintptr_t)p, msg_len(t, i), mr->lkey };
}

/* Posts messages i and i+1 with ibv_post_send, resuming after bad_wr. */
static void a_post_list(int t, int i)
{
	struct ibv_sge s[2] = { a_sge(t, i), a_sge(t, i + 1) };
	struct ibv_send_wr w[2];
	for (int k = 0; k < 2; k++)
		w[k] = (struct ibv_send_wr){ .wr_id = tag(t, i + k), .sg_list = &s[k], .num_sge = 1,
			.opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED, .next = k ? NULL : &w[1] };
	struct ibv_send_wr *next = &w[0], *bad;
	int ret;
	while ((ret = ibv_post_send(qa, next, &bad))) {
		CHECK(ret == ENOMEM, "post_send: %s", strerror(ret));
		next = bad;
		a_poll(t);
	}
}

/* Posts messages i and i+1 as one ibv_wr_* batch, retried whole. */
static void a_post_batch(int t, int i)
{
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qa);
	struct ibv_sge s[2] = { a_sge(t, i), a_sge(t, i + 1) };
	int ret;
	do {
		ibv_wr_start(x);
		for (int k = 0; k < 2; k++) {
			x->wr_id = tag(t, i + k);
			x->wr_flags = IBV_SEND_SIGNALED;
			ibv_wr_send(x);
			ibv_wr_set_sge(x, s[k].lkey, s[k].addr, s[k].length);
		}
		ret = ibv_wr_complete(x);
		if (ret) {
			CHECK(ret == ENOMEM, "wr_complete: %s", strerror(ret));
			a_poll(t);
		}
	} while (ret);
}

static void *a_thread(void *arg)
{
	int t = (int)(intptr_t)arg;
	for (int i = 0; i < N; i += 2) {
		if (t % 2 == 0)
			a_post_list(t, i);
		else
			a_post_batch(t, i);
		a_poll(t);
	}
	while (atomic_load(&a_send_done) < NT * N || atomic_load(&a_recv_done) < NT * N)
		a_poll(t);
	return NULL;
}

/* ---- a QP pair per thread --------------------------------------------- */

static void *b_thread(void *arg)
{
	int p = (int)(intptr_t)arg;
	uint8_t *send = mem + (size_t)(2 * NT * N + 2 * p * NB) * SLOT, *recv = send + (size_t)NB * SLOT;
	struct ibv_cq *cq = ibv_create_cq(ctx, 2 * NB, NULL, NULL, 0);
	CHECK(cq, "create_cq (pair %d)", p);
	struct ibv_qp *x = make_qp(cq, cq, 1, 0), *y = make_qp(cq, cq, NB, 0);
	connect_qp(x, y->qp_num);
	connect_qp(y, x->qp_num);
	post_receives(y, recv, NB);
	static _Thread_local int sent_seen[NB], recv_seen[NB];
	memset(sent_seen, 0, sizeof(sent_seen));
	memset(recv_seen, 0, sizeof(recv_seen));
	int posted = 0, sends = 0, recvs = 0;
	while (sends < NB || recvs < NB) {
		if (posted < NB) {
			uint8_t *buf = send + (size_t)posted * SLOT;
			fill(buf, p, posted);
			struct ibv_sge s = { (uintptr_t)buf, msg_len(p, posted), mr->lkey };
			struct ibv_send_wr w = { .wr_id = (uint64_t)posted, .sg_list = &s, .num_sge = 1,
				.opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
			int ret = ibv_post_send(x, &w, &bad);
			CHECK(!ret || ret == ENOMEM, "pair %d post_send: %s", p, strerror(ret));
			posted += !ret;
		}
		struct ibv_wc wc[8];
		int n = ibv_poll_cq(cq, 8, wc);
		CHECK(n >= 0, "pair %d poll_cq", p);
		for (int k = 0; k < n; k++) {
			CHECK(wc[k].status == IBV_WC_SUCCESS, "pair %d: status %s", p, ibv_wc_status_str(wc[k].status));
			CHECK(wc[k].wr_id < NB, "pair %d: wr_id", p);
			if (wc[k].opcode == IBV_WC_SEND) {
				CHECK(wc[k].qp_num == x->qp_num && !sent_seen[wc[k].wr_id]++, "pair %d: send twice", p);
				sends++;
			} else {
				CHECK(wc[k].opcode == IBV_WC_RECV && wc[k].qp_num == y->qp_num, "pair %d: opcode", p);
				uint64_t g = check_msg(recv + wc[k].wr_id * SLOT, wc[k].byte_len, NP, NB);
				CHECK((int)(g >> 32) == p, "pair %d got pair %d's message", p, (int)(g >> 32));
				CHECK(!recv_seen[(uint32_t)g]++, "pair %d: message received twice", p);
				recvs++;
			}
		}
		check_deadline("a QP pair");
	}
	CHECK(!ibv_destroy_qp(x) && !ibv_destroy_qp(y) && !ibv_destroy_cq(cq), "pair %d teardown", p);
	return NULL;
}

int main(void)
{
	clock_gettime(CLOCK_MONOTONIC, &start);
	ctx = open_device_named("softverbs0");
	CHECK(ctx, "open");
	pd = ibv_alloc_pd(ctx);
	size_t len = (size_t)(2 * NT * N + 2 * NP * NB) * SLOT;
	mem = calloc(1, len);
	CHECK(pd && mem, "pd/memory");
	mr = ibv_reg_mr(pd, mem, len, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "reg_mr: %s", strerror(errno));
	a_send = mem;
	a_recv = mem + (size_t)NT * N * SLOT;

	struct ibv_cq_init_attr_ex ca = { .cqe = NT * N, .wc_flags = IBV_WC_STANDARD_FLAGS };
	a_scq = ibv_create_cq_ex(ctx, &ca);
	a_rcq = ibv_create_cq(ctx, NT * N, NULL, NULL, 0);
	CHECK(a_scq && a_rcq, "create CQs: %s", strerror(errno));
	qa = make_qp(ibv_cq_ex_to_cq(a_scq), a_rcq, 1, 1);
	qb = make_qp(ibv_cq_ex_to_cq(a_scq), a_rcq, NT * N, 0);
	connect_qp(qa, qb->qp_num);
	connect_qp(qb, qa->qp_num);
	post_receives(qb, a_recv, NT * N);

	pthread_t th[NT + NP];
	for (int t = 0; t < NT; t++)
		CHECK(!pthread_create(&th[t], NULL, a_thread, (void *)(intptr_t)t), "pthread_create");
	for (int p = 0; p < NP; p++)
		CHECK(!pthread_create(&th[NT + p], NULL, b_thread, (void *)(intptr_t)p), "pthread_create");
	for (int k = 0; k < NT + NP; k++)
		pthread_join(th[k], NULL);

	for (int t = 0; t < NT; t++)
		for (int i = 0; i < N; i++)
			CHECK(a_sent_seen[t][i] == 1 && a_recv_seen[t][i] == 1, "message %d/%d: sent %d, received %d",
			      t, i, a_sent_seen[t][i], a_recv_seen[t][i]);
	CHECK(!ibv_destroy_qp(qa) && !ibv_destroy_qp(qb), "destroy QPs");
	CHECK(!ibv_destroy_cq(ibv_cq_ex_to_cq(a_scq)) && !ibv_destroy_cq(a_rcq), "destroy CQs");
	CHECK(!ibv_dereg_mr(mr) && !ibv_dealloc_pd(pd) && !ibv_close_device(ctx), "teardown");
	printf("threads ok: %d messages on one QP from %d threads, %d on %d own QP pairs\n",
	       NT * N, NT, NP * NB, NP);
	return 0;
}
