/* What the C checks in tests/programs share: failing with a message,
 * opening a device by name, and connecting an RC QP (to itself, or to a
 * peer). Header-only: each check is one source file,
 * compiled with `cc FILE.c -libverbs` by the scripts that run it. */
#ifndef SOFTVERBS_TEST_UTIL_H
#define SOFTVERBS_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>
#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>

/* Exits 1 with the message unless the condition holds. */
#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } } while (0)

/* Opens the device called `name`; exits 1 if it is not listed. */
static inline struct ibv_context *open_device_named(const char *name)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list, "no device list");
	for (int i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name)) {
			struct ibv_context *c = ibv_open_device(list[i]);
			ibv_free_device_list(list);
			return c;
		}
	CHECK(0, "%s not listed", name);
	return NULL;
}

/* Moves an RC QP of port 1 to RTS, connected to QP `dest` at `dgid`
 * through GID `sgid_index`, granting peers `access` and allowing one READ
 * or atomic outstanding each way (PSNs 5, path MTU 1024, timeout 14,
 * retries 7); exits on a failure. */
static inline void connect_rc(struct ibv_qp *qp, uint32_t dest, union ibv_gid dgid, int sgid_index,
			      int access)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = access };
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), "INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = dest;
	a.rq_psn = 5; a.min_rnr_timer = 1; a.max_dest_rd_atomic = 1;
	a.ah_attr.is_global = 1; a.ah_attr.port_num = 1; a.ah_attr.grh.dgid = dgid;
	a.ah_attr.grh.sgid_index = sgid_index; a.ah_attr.grh.hop_limit = 1;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER), "RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS; a.sq_psn = 5; a.timeout = 14; a.retry_cnt = 7; a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			     IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC), "RTS");
}

/* Opens softverbs0 with a PD (into *pd) and a CQ of 16 entries, which it
 * returns; exits on a failure. */
static inline struct ibv_cq *open_pd_cq(struct ibv_pd **pd)
{
	struct ibv_context *ctx = open_device_named("softverbs0");
	CHECK(ctx, "open softverbs0");
	*pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(*pd && cq, "PD, CQ");
	return cq;
}

/* Two processes, a target (the child) and its peer, and the pipes between
 * them: `in` and `out` are each side's own ends (close-on-exec, so that
 * a daemon a context starts does not hold them; the other side's ends
 * closed, so that one that exits early ends the other's read). Returns
 * fork's value. */
struct link { int in, out; };
static inline pid_t fork_linked(struct link *l)
{
	int to_peer[2], to_target[2];
	CHECK(!pipe(to_peer) && !pipe(to_target), "pipe");
	for (int i = 0; i < 2; i++)
		CHECK(!fcntl(to_peer[i], F_SETFD, FD_CLOEXEC) &&
		      !fcntl(to_target[i], F_SETFD, FD_CLOEXEC), "close-on-exec");
	pid_t target = fork();
	CHECK(target >= 0, "fork");
	close(target == 0 ? to_peer[0] : to_peer[1]);
	close(target == 0 ? to_target[1] : to_target[0]);
	l->in = target == 0 ? to_target[0] : to_peer[0];
	l->out = target == 0 ? to_peer[1] : to_target[1];
	return target;
}

/* What one side of a linked pair tells the other: its QP, the MR it
 * offers and its GID index 1 GID. */
struct end { uint32_t qpn, rkey; uint64_t addr; union ibv_gid gid; };

/* An RC QP on `cq` for both queues, 4 WRs of one SGE each way; tells
 * the other side of `l` about it and `mr`, and connects it to theirs
 * (`peer`), granting `access`. */
static inline struct ibv_qp *connect_linked(struct link *l, struct ibv_pd *pd, struct ibv_cq *cq,
					    struct ibv_mr *mr, int access, struct end *peer)
{
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 4, .max_recv_wr = 4,
						.max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	CHECK(mr && qp, "MR, QP");
	struct end me = { .qpn = qp->qp_num, .rkey = mr->rkey, .addr = (uintptr_t)mr->addr };
	CHECK(!ibv_query_gid(pd->context, 1, 1, &me.gid), "query_gid");
	CHECK(write(l->out, &me, sizeof(me)) == sizeof(me) &&
	      read(l->in, peer, sizeof(*peer)) == sizeof(*peer), "exchange");
	connect_rc(qp, peer->qpn, peer->gid, 1, access);
	return qp;
}

/* Posts one signaled WR of `opcode` (an RDMA WRITE or READ) of 64 bytes
 * between `buf` in `mr` and the peer's MR, waits for its completion on
 * `cq`, which must succeed; `name` says which in a failure. */
static inline void one_wr(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_mr *mr, char *buf,
			  const struct end *peer, enum ibv_wr_opcode opcode, const char *name)
{
	struct ibv_sge s = { (uintptr_t)buf, 64, mr->lkey };
	struct ibv_send_wr w = { .sg_list = &s, .num_sge = 1, .opcode = opcode,
				 .send_flags = IBV_SEND_SIGNALED }, *bad;
	w.wr.rdma.remote_addr = peer->addr;
	w.wr.rdma.rkey = peer->rkey;
	CHECK(!ibv_post_send(qp, &w, &bad), "post %s", name);
	struct ibv_wc wc;
	int n;
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
		;
	CHECK(n == 1 && wc.status == IBV_WC_SUCCESS, "%s: %s", name,
	      n == 1 ? ibv_wc_status_str(wc.status) : "poll failed");
}

/* Moves an RC QP of port 1 to RTS, connected to itself through GID
 * `gid_index`, granting no remote access; exits on a failure. */
static inline void to_rts_via(struct ibv_qp *qp, int gid_index)
{
	union ibv_gid gid;
	CHECK(!ibv_query_gid(qp->context, 1, gid_index, &gid), "query_gid");
	connect_rc(qp, qp->qp_num, gid, gid_index, 0);
}

/* to_rts_via GID 0. */
static inline void to_rts(struct ibv_qp *qp)
{
	to_rts_via(qp, 0);
}

#endif
