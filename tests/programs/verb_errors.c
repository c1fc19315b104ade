/* Checks verb error paths through the provider, as a program sees them:
 * a post list whose second WR is invalid returns EINVAL with bad_wr at
 * that WR while the first one is executed; a completion channel still
 * used by a CQ cannot be destroyed (EBUSY); a GID index past the table
 * makes ibv_query_gid fail, and an empty entry's ibv_query_gid_type is
 * RoCE v1, as libibverbs answers for one; a completion event still unread when its CQ
 * is destroyed is dropped, as the kernel drops it (reading it would hand
 * the freed CQ to the program); a UD WR whose AH is another context's is
 * EINVAL, through ibv_post_send and ibv_wr_* (it was sent to the address
 * of this context's AH of the same engine handle); a controlled Q_Key
 * (bit 31) is EPERM without CAP_NET_RAW, as on Linux 6.5 and later; a
 * CQ cannot be bound to another context's completion channel (EBADF:
 * its events never arrived); a solicited-only arm after a
 * next-completion arm leaves the CQ armed for the next completion (the
 * unsolicited one's event was lost); ibv_create_qp_ex refuses
 * send_ops_flags the QP type cannot carry (READ or atomics on UC, WRITE
 * on UD: EOPNOTSUPP, as rxe and mlx5), and ibv_wr_complete answers too
 * many SGEs or too much inline data with ENOMEM (mlx5; rxe ENOSPC), not
 * EINVAL; an XRC_SEND QP (no receive CQ) and a RAW_PACKET QP are
 * EOPNOTSUPP, types softverbs does not offer (it was EINVAL for the
 * missing receive CQ), a RAW_PACKET QP EPERM without CAP_NET_RAW, as the
 * kernel's ib_uverbs refuses it before any provider; a process out of descriptors gets EMFILE from
 * ibv_reg_mr, not EFAULT; the completions a QP has in its CQ when it is
 * destroyed stay there to be polled, as on rxe (libfabric's verbs
 * provider destroys the QP before it drains the CQ, and takes a WR it
 * does not find there for flushed). Prints "verb errors ok". */
#include <errno.h>
#include <linux/capability.h>
#include <poll.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>
#include "test_util.h"

/* libibverbs' private verb (IBVERBS_PRIVATE_34): type 0 is RoCE v1 (or
 * IB), 1 RoCE v2 (enum ibv_gid_type_sysfs of infiniband/driver.h). */
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index,
		       int *type);

/* A UD QP of `pd` in RTS. */
static struct ibv_qp *ud_qp(struct ibv_pd *pd, struct ibv_cq *cq, int extended)
{
	struct ibv_qp_init_attr_ex qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD, .pd = pd };
	if (extended) {
		qa.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		qa.send_ops_flags = IBV_QP_EX_WITH_SEND;
	}
	struct ibv_qp *qp = ibv_create_qp_ex(pd->context, &qa);
	CHECK(qp, "create UD QP");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11 };
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY), "INIT");
	a.qp_state = IBV_QPS_RTR;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE), "RTR");
	a.qp_state = IBV_QPS_RTS;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), "RTS");
	return qp;
}

/* An AH of another context (the same device opened again) on a UD WR. */
static void an_ah_of_another_context(struct ibv_pd *pd, struct ibv_cq *cq, struct ibv_mr *mr)
{
	struct ibv_context *other = open_device_named("softverbs0");
	struct ibv_pd *other_pd = other ? ibv_alloc_pd(other) : NULL;
	CHECK(other_pd, "a second context");
	union ibv_gid gid;
	CHECK(!ibv_query_gid(pd->context, 1, 0, &gid), "query_gid");
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1, .grh = { .dgid = gid, .hop_limit = 64 } };
	struct ibv_ah *mine = ibv_create_ah(pd, &aa), *theirs = ibv_create_ah(other_pd, &aa);
	CHECK(mine && theirs, "create_ah");
	struct ibv_sge s = { (uintptr_t)mr->addr, 16, mr->lkey };
	struct ibv_send_wr w = { .wr_id = 9, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED }, *bad = NULL;
	w.wr.ud.ah = theirs;
	w.wr.ud.remote_qpn = 1;
	w.wr.ud.remote_qkey = 0x11;
	struct ibv_qp *qp = ud_qp(pd, cq, 0);
	CHECK(ibv_post_send(qp, &w, &bad) == EINVAL && bad == &w, "ibv_post_send with another context's AH");
	struct ibv_qp *qpx = ud_qp(pd, cq, 1);
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qpx);
	ibv_wr_start(x);
	x->wr_id = 10;
	ibv_wr_send(x);
	ibv_wr_set_ud_addr(x, theirs, 1, 0x11);
	ibv_wr_set_sge(x, mr->lkey, (uintptr_t)mr->addr, 16);
	CHECK(ibv_wr_complete(x) == EINVAL, "ibv_wr_* with another context's AH");
	struct ibv_wc wc;
	CHECK(ibv_poll_cq(cq, 1, &wc) == 0, "a completion for a refused WR");
	CHECK(!ibv_destroy_qp(qp) && !ibv_destroy_qp(qpx) && !ibv_destroy_ah(mine) && !ibv_destroy_ah(theirs),
	      "destroy");
	CHECK(!ibv_dealloc_pd(other_pd) && !ibv_close_device(other), "close the second context");
}

/* A QP of `type` asking for `ops`, or NULL. */
static struct ibv_qp *qp_with_ops(struct ibv_pd *pd, struct ibv_cq *cq, enum ibv_qp_type type, uint64_t ops)
{
	struct ibv_qp_init_attr_ex qa = { .send_cq = cq, .recv_cq = cq, .qp_type = type,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1,
			 .max_inline_data = 16 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = pd,
		.send_ops_flags = ops };
	return ibv_create_qp_ex(pd->context, &qa);
}

/* send_ops_flags by QP type, and the ibv_wr_* setters' limits. */
static void extended_qp_limits(struct ibv_pd *pd, struct ibv_cq *cq, struct ibv_mr *mr)
{
	const uint64_t refused[][2] = {
		{ IBV_QPT_UC, IBV_QP_EX_WITH_RDMA_READ },
		{ IBV_QPT_UC, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD },
		{ IBV_QPT_UD, IBV_QP_EX_WITH_RDMA_WRITE },
		{ IBV_QPT_UD, IBV_QP_EX_WITH_SEND_WITH_INV },
	};
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		errno = 0;
		struct ibv_qp *qp = qp_with_ops(pd, cq, refused[i][0], refused[i][1]);
		CHECK(!qp && errno == EOPNOTSUPP, "send_ops_flags %#llx on QP type %llu: not EOPNOTSUPP (errno %d)",
		      (unsigned long long)refused[i][1], (unsigned long long)refused[i][0], errno);
	}
	struct ibv_qp *uc = qp_with_ops(pd, cq, IBV_QPT_UC, IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND);
	CHECK(uc, "a UC QP with WRITE and SEND");
	CHECK(!ibv_destroy_qp(uc), "destroy");
	struct ibv_qp *rc = qp_with_ops(pd, cq, IBV_QPT_RC, IBV_QP_EX_WITH_SEND);
	CHECK(rc, "an RC QP with SEND");
	to_rts(rc);
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(rc);
	struct ibv_sge two[2] = { { (uintptr_t)mr->addr, 8, mr->lkey }, { (uintptr_t)mr->addr + 8, 8, mr->lkey } };
	ibv_wr_start(x);
	ibv_wr_send(x);
	ibv_wr_set_sge_list(x, 2, two);
	CHECK(ibv_wr_complete(x) == ENOMEM, "ibv_wr_set_sge_list above max_send_sge: not ENOMEM");
	static char big[1024]; /* above any inline size the device grants */
	ibv_wr_start(x);
	ibv_wr_send(x);
	ibv_wr_set_inline_data(x, big, sizeof(big));
	CHECK(ibv_wr_complete(x) == ENOMEM, "ibv_wr_set_inline_data above max_inline_data: not ENOMEM");
	struct ibv_data_buf halves[2] = { { big, sizeof(big) / 2 }, { big + sizeof(big) / 2, sizeof(big) / 2 } };
	ibv_wr_start(x);
	ibv_wr_send(x);
	ibv_wr_set_inline_data_list(x, 2, halves);
	CHECK(ibv_wr_complete(x) == ENOMEM, "ibv_wr_set_inline_data_list above max_inline_data: not ENOMEM");
	/* A count far beyond the array: the buffers are read in order and
	 * none after the one that takes the total past the limit (the second
	 * here: 8 bytes fit any inline size, 8 + 1016 none), as rxe's and
	 * mlx5's setters read them; a provider that took all the count at
	 * once read past the array and crashed. */
	struct ibv_data_buf small_then_big[2] = { { big, 8 }, { big + 8, sizeof(big) - 8 } };
	ibv_wr_start(x);
	ibv_wr_send(x);
	ibv_wr_set_inline_data_list(x, (size_t)1 << 40, small_then_big);
	CHECK(ibv_wr_complete(x) == ENOMEM, "ibv_wr_set_inline_data_list with a count past its array: not ENOMEM");
	struct ibv_wc wc;
	CHECK(ibv_poll_cq(cq, 1, &wc) == 0, "a completion for a refused WR");
	CHECK(!ibv_destroy_qp(rc), "destroy");
}

/* Whether this thread has CAP_NET_RAW in its effective set; then, for
 * `set` 0 or 1, drops it from or raises it into that set. */
static int net_raw(int set)
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];
	CHECK(!syscall(SYS_capget, &h, d), "capget");
	int had = !!(d[0].effective & (1u << CAP_NET_RAW));
	if (set >= 0) {
		d[0].effective = set ? d[0].effective | (1u << CAP_NET_RAW) : d[0].effective & ~(1u << CAP_NET_RAW);
		CHECK(!syscall(SYS_capset, &h, d), "capset");
	}
	return had;
}

/* A controlled Q_Key: the process needs CAP_NET_RAW (kernel ib_uverbs). */
static void a_controlled_qkey(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp *qp = ud_qp(pd, cq, 0);
	struct ibv_qp_attr a = { .qkey = 0x80000011 };
	if (net_raw(-1)) {
		CHECK(!ibv_modify_qp(qp, &a, IBV_QP_QKEY), "a controlled Q_Key with CAP_NET_RAW");
		net_raw(0);
		CHECK(ibv_modify_qp(qp, &a, IBV_QP_QKEY) == EPERM, "a controlled Q_Key without CAP_NET_RAW");
		net_raw(1);
	} else {
		CHECK(ibv_modify_qp(qp, &a, IBV_QP_QKEY) == EPERM, "a controlled Q_Key without CAP_NET_RAW");
	}
	a.qkey = 0x11;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_QKEY), "an ordinary Q_Key");
	CHECK(!ibv_destroy_qp(qp), "destroy");
}

/* A process out of descriptors registers no MR, with EMFILE (the
 * provider reads /proc/self/maps to check the memory), not EFAULT: its
 * memory is fine. Once descriptors are free again, the same MR registers. */
static void out_of_descriptors(struct ibv_pd *pd)
{
	static char buf[4096];
	struct rlimit was, low;
	CHECK(!getrlimit(RLIMIT_NOFILE, &was), "getrlimit");
	low = was;
	low.rlim_cur = 512; /* a few hundred to use up, whatever the hard limit */
	CHECK(!setrlimit(RLIMIT_NOFILE, &low), "setrlimit");
	int fds[512], n = 0;
	while (n < 512 && (fds[n] = open("/dev/null", O_RDONLY)) >= 0)
		n++;
	CHECK(n < 512 && errno == EMFILE, "descriptors did not run out");
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	int err = errno;
	while (n > 0)
		close(fds[--n]);
	CHECK(!setrlimit(RLIMIT_NOFILE, &was), "setrlimit back");
	CHECK(!mr && err == EMFILE, "reg_mr out of descriptors: %s, not EMFILE", mr ? "registered" : strerror(err));
	mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr && !ibv_dereg_mr(mr), "reg_mr once descriptors are free");
}

/* A SEND on a QP connected to itself, its completion event awaited on
 * `ch` (so at least one completion is in `cq`), the QP destroyed: what
 * the CQ held is still polled, and says it succeeded. */
static void completions_outlive_their_qp(struct ibv_pd *pd, struct ibv_cq *cq,
					 struct ibv_comp_channel *ch, struct ibv_mr *mr)
{
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC };
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	CHECK(qp, "create_qp");
	to_rts(qp);
	uint32_t qp_num = qp->qp_num;
	char *buf = mr->addr;
	struct ibv_sge rs = { (uintptr_t)buf + 2048, 64, mr->lkey }, ss = { (uintptr_t)buf, 16, mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 21, .sg_list = &rs, .num_sge = 1 }, *rbad;
	struct ibv_send_wr sw = { .wr_id = 22, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *sbad;
	CHECK(!ibv_req_notify_cq(cq, 0), "req_notify_cq");
	CHECK(!ibv_post_recv(qp, &rw, &rbad) && !ibv_post_send(qp, &sw, &sbad), "post");
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	CHECK(!ibv_get_cq_event(ch, &ev_cq, &ev_ctx) && ev_cq == cq, "get_cq_event");
	ibv_ack_cq_events(cq, 1);
	CHECK(!ibv_destroy_qp(qp), "destroy the QP with completions in its CQ");
	struct ibv_wc wc[4];
	int n = ibv_poll_cq(cq, 4, wc);
	CHECK(n >= 1, "the destroyed QP's completions left its CQ (%d polled)", n);
	for (int i = 0; i < n; i++)
		CHECK(wc[i].qp_num == qp_num && wc[i].status == IBV_WC_SUCCESS &&
		      (wc[i].wr_id == 21 || wc[i].wr_id == 22),
		      "completion %d: QP %u status %d wr_id %llu", i, wc[i].qp_num, wc[i].status,
		      (unsigned long long)wc[i].wr_id);
}

int main(void)
{
	struct ibv_context *ctx = open_device_named("softverbs0");
	CHECK(ctx, "open");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	CHECK(pd && ch, "pd, channel");
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, ch, 0);
	static char buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(cq && mr, "cq, mr");

	/* A channel in use by a CQ. */
	CHECK(ibv_destroy_comp_channel(ch) == EBUSY, "destroy_comp_channel in use: not EBUSY");

	/* Another context's completion channel. */
	struct ibv_context *ctx2 = open_device_named("softverbs0");
	CHECK(ctx2, "open a second context");
	struct ibv_comp_channel *ch2 = ibv_create_comp_channel(ctx2);
	CHECK(ch2, "channel of the second context");
	errno = 0;
	CHECK(!ibv_create_cq(ctx, 16, NULL, ch2, 0) && errno == EBADF,
	      "a CQ bound to another context's channel: not EBADF (errno %d)", errno);
	CHECK(!ibv_destroy_comp_channel(ch2) && !ibv_close_device(ctx2), "close the second context");

	/* Types softverbs does not offer, with or without a receive CQ. */
	struct ibv_qp_init_attr xrc = { .send_cq = cq, .cap = { .max_send_wr = 1, .max_send_sge = 1 },
					.qp_type = IBV_QPT_XRC_SEND };
	errno = 0;
	CHECK(!ibv_create_qp(pd, &xrc) && errno == EOPNOTSUPP, "an XRC_SEND QP: not EOPNOTSUPP (errno %d)", errno);
	struct ibv_qp_init_attr raw = { .send_cq = cq, .recv_cq = cq,
					.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
					.qp_type = IBV_QPT_RAW_PACKET };
	int privileged = net_raw(-1);
	errno = 0;
	CHECK(!ibv_create_qp(pd, &raw) && errno == (privileged ? EOPNOTSUPP : EPERM),
	      "a RAW_PACKET QP: errno %d", errno);
	/* Without CAP_NET_RAW, EPERM before anything (kernel ib_uverbs). */
	if (privileged) {
		net_raw(0);
		errno = 0;
		CHECK(!ibv_create_qp(pd, &raw) && errno == EPERM,
		      "a RAW_PACKET QP without CAP_NET_RAW: not EPERM (errno %d)", errno);
		net_raw(1);
	}

	/* A GID index past the table. */
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 100000, &gid) == -1, "query_gid past the table succeeded");
	/* An empty entry's type reads RoCE v1 (0), as libibverbs answers for
	 * one (ibv_query_gid_ex fails it ENODATA); it read v2 (1; found by a
	 * helper). pyverbs and librdmacm call this private verb. */
	int gid_type = 9;
	CHECK(!ibv_query_gid_type(ctx, 1, 1, &gid_type) && gid_type == 1,
	      "GID 1 is RoCE v2 (%d)", gid_type);
	CHECK(!ibv_query_gid_type(ctx, 1, 15, &gid_type) && gid_type == 0,
	      "an empty GID entry reads RoCE v1 (%d)", gid_type);

	/* A post list: the first WR is good, the second has too many SGEs. */
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC };
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	CHECK(qp, "create_qp");
	to_rts(qp);
	struct ibv_sge rs = { (uintptr_t)buf + 2048, 64, mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 7, .sg_list = &rs, .num_sge = 1 }, *rbad;
	CHECK(!ibv_post_recv(qp, &rw, &rbad), "post_recv");
	struct ibv_sge ss[2] = { { (uintptr_t)buf, 16, mr->lkey }, { (uintptr_t)buf + 16, 16, mr->lkey } };
	struct ibv_send_wr w[2] = {
		{ .wr_id = 1, .sg_list = ss, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
		{ .wr_id = 2, .sg_list = ss, .num_sge = 2, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
	}, *bad = NULL;
	w[0].next = &w[1];
	CHECK(ibv_post_send(qp, w, &bad) == EINVAL, "post_send list: not EINVAL");
	CHECK(bad == &w[1], "bad_wr is not the second WR");
	/* The first WR went out: its send and the matching receive complete. */
	int seen = 0;
	for (int spins = 0; seen < 2 && spins < 10000000; spins++) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n >= 0, "poll_cq");
		if (n) {
			CHECK(wc.status == IBV_WC_SUCCESS, "wc status %d", wc.status);
			CHECK(wc.wr_id == 1 || wc.wr_id == 7, "unexpected wr_id %llu", (unsigned long long)wc.wr_id);
			seen++;
		}
	}
	CHECK(seen == 2, "the first WR did not complete");

	an_ah_of_another_context(pd, cq, mr);
	extended_qp_limits(pd, cq, mr);
	a_controlled_qkey(pd, cq);
	out_of_descriptors(pd);
	completions_outlive_their_qp(pd, cq, ch, mr);

	/* An event left unread in the channel goes with its CQ. */
	CHECK(!ibv_req_notify_cq(cq, 0), "req_notify_cq");
	CHECK(!ibv_req_notify_cq(cq, 1), "req_notify_cq, solicited only");
	CHECK(!ibv_post_recv(qp, &rw, &rbad), "post_recv");
	w[0].next = NULL;
	CHECK(!ibv_post_send(qp, w, &bad), "post_send");
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	CHECK(poll(&pfd, 1, 10000) == 1, "no completion event within 10 s");
	CHECK(!ibv_destroy_qp(qp) && !ibv_dereg_mr(mr) && !ibv_destroy_cq(cq), "destroy");
	CHECK(poll(&pfd, 1, 0) == 0, "an event of the destroyed CQ is still in the channel");
	CHECK(!ibv_destroy_comp_channel(ch), "destroy_comp_channel once unused");
	CHECK(!ibv_dealloc_pd(pd) && !ibv_close_device(ctx), "close");
	puts("verb errors ok");
	return 0;
}
