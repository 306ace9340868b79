"""Fair queuing across tenants (issue 32): inside a priority, the tenant
with the least service goes next; the per-key series say what each got.
Against a real llama-server on the demo models; with one slot, the order
in which requests leave sluice's queue is the order in which they end, and
with two, the fair reserve decides who may take the second."""

import os

import sluice_test as st
from test_tenants import (bearer, completion, hold, keys_yaml, metric,
                          send_queued)

# Not a measure: how long a busy machine may take before a test gives up.
SAFETY_NET_S = 240
ADMIN = "admin-secret"
KEYS = {"alice": {"secret": "sk-alice"},
        "bob": {"secret": "sk-bob", "weight": 2},
        "holder": {"secret": "sk-holder"}}


class Fairness(st.TestCase):
    def keys_config(self):
        config = os.path.join(self.tmp, "sluice.yaml")
        with open(config, "w") as f:
            f.write(keys_yaml(KEYS))
        return ("--config", config)

    def serve_flood_then_two(self, *args, who=None):
        """alice queues four requests, then bob two, behind a held slot;
        returns the access log's order once the slot is let go. `who`
        gives each the headers that say who sends it (default: its key)."""
        if who is None:
            who = {name: bearer(fields["secret"])
                   for name, fields in KEYS.items()}
            args += self.keys_config()
        # One slot; no aging, so that only fairness can reorder a band.
        s = self.sluice("--model", st.MODEL_SLOW,
                        "--slots", "1", "--aging-rate", "0",
                        "--admin-key", ADMIN, *args)
        holder = hold(s, who["holder"])

        answers = {}
        sends = [("a0", "alice"), ("a1", "alice"), ("a2", "alice"),
                 ("a3", "alice"), ("b0", "bob"), ("b1", "bob")]
        # Each is queued before the next is sent.
        threads = [send_queued(s, rid,
                               dict(who[name], **{"X-Request-Id": rid}),
                               answers)
                   for rid, name in sends]
        holder.close()
        for t in threads:
            t.join(SAFETY_NET_S)
        ids = [rid for rid, _ in sends]
        self.assertEqual({rid: r.status for rid, r in answers.items()},
                         {rid: 200 for rid in ids})
        st.wait_until(lambda: len(s.access_order(ids)) == len(ids),
                      SAFETY_NET_S, "the access log lines")
        return s, s.access_order(ids)

    def test_a_flood_does_not_push_another_tenant_behind_it(self):
        s, order = self.serve_flood_then_two()
        # alice's first goes first (bob was lifted to her service, and
        # ties go to the older request); bob, who has had nothing, then
        # goes before alice's second at the latest, and both of bob's
        # before the last of alice's.
        self.assertEqual(order[0], "a0")
        self.assertLess(order.index("b0"), order.index("a2"))
        self.assertLess(order.index("b1"), order.index("a3"))

        # What fair queuing counted, per key: exactly the prompt tokens
        # plus twice the generated ones, as the usage counted them.
        usage = s.get("/v1/usage", headers=bearer(ADMIN)).json()["keys"]
        text = s.get("/metrics", headers=bearer(ADMIN)).body.decode()
        for key, n in (("alice", 4), ("bob", 2)):
            u = usage[key]
            self.assertEqual(u["requests"], n)
            self.assertEqual(
                metric(text, "sluice_key_service_tokens_total", key=key),
                u["prompt_tokens"] + 2 * u["completion_tokens"])
            self.assertEqual(
                metric(text, "sluice_key_queue_wait_seconds_count", key=key),
                n)
            self.assertGreater(
                metric(text, "sluice_key_slot_seconds_total", key=key), 0)
        self.assertEqual(metric(text, "sluice_key_weight", key="alice"), 1)
        self.assertEqual(metric(text, "sluice_key_weight", key="bob"), 2)

    def test_address_fairness_tells_clients_apart_behind_a_proxy(self):
        # No keys: the client addresses a trusted proxy forwards are the
        # tenants.
        who = {name: {"X-Forwarded-For": "10.0.0.%d" % i}
               for i, name in enumerate(("alice", "bob", "holder"), 1)}
        _, order = self.serve_flood_then_two(
            "--fairness", "address", "--trusted-proxy", "127.0.0.0/8",
            who=who)
        self.assertEqual(order[0], "a0")
        self.assertLess(order.index("b0"), order.index("a2"))
        self.assertLess(order.index("b1"), order.index("a3"))

    def test_fair_reserve_starts_a_tenant_below_its_share_at_once(self):
        # Two slots, one kept for tenants below their share: alice alone
        # gets the other; her second request waits beside the free one.
        s = self.sluice("--model", st.MODEL_SLOW, "--slots", "2",
                        "--fair-reserve", "1", "--aging-rate", "0",
                        "--admin-key", ADMIN, *self.keys_config())
        holder = hold(s, bearer("sk-alice"))
        answers = {}
        waiting = send_queued(s, "a1", bearer("sk-alice"), answers)
        # bob, holding none of his share, takes the kept slot at once
        # and is answered while alice's stream runs and her second waits.
        r = s.post("/completion", completion("b0", n=4),
                   headers=bearer("sk-bob"), timeout=SAFETY_NET_S)
        self.assertEqual(r.status, 200)
        self.assertEqual(s.health().json()["queued"], 1)
        holder.close()
        waiting.join(SAFETY_NET_S)
        self.assertEqual(answers["a1"].status, 200)

    def test_without_a_fair_reserve_a_flood_fills_every_slot(self):
        s = self.sluice("--model", st.MODEL_SLOW, "--slots", "2",
                        "--aging-rate", "0", "--admin-key", ADMIN,
                        *self.keys_config())
        holders = [hold(s, bearer("sk-alice")) for _ in range(2)]
        answers = {}
        # bob waits (is queued) for one of alice's generations to end.
        waiting = send_queued(s, "b0", bearer("sk-bob"), answers)
        holders[0].close()
        waiting.join(SAFETY_NET_S)
        self.assertEqual(answers["b0"].status, 200)
        holders[1].close()

    def test_fairness_off_serves_a_band_in_arrival_order(self):
        _, order = self.serve_flood_then_two("--fairness", "off")
        self.assertEqual(order, ["a0", "a1", "a2", "a3", "b0", "b1"])


if __name__ == "__main__":
    st.main()
