"""Prefix affinity through sluice: requests whose messages begin alike go to
the replica the first of them went to, and with --affinity off they take
turns. Two recording upstreams stand in for two replicas of one model: what
each received shows where sluice sent every request."""
import json

import sluice_test as st

SAFETY_NET_S = 60


def system_prompt(tag):
    """A system message of several affinity blocks (256 bytes each)."""
    return ("You are assistant %s. " % tag) + " ".join(
        "rule %d of %s." % (i, tag) for i in range(120))


def chat(system, turn):
    return {"messages": [{"role": "system", "content": system},
                         {"role": "user", "content": "turn %d" % turn}],
            "max_tokens": 1}


class PrefixAffinity(st.TestCase):

    def start(self, *args):
        ups = [self.recording_upstream(answer=st.models_or_completion,
                                       total_slots=4) for _ in range(2)]
        s = self.sluice("--upstream", ups[0].url, "--upstream", ups[1].url,
                        "--stream-upstream", "off", *args)
        s.wait_all_upstreams_ready(SAFETY_NET_S)
        return ups, s

    def send(self, s, system, turn):
        r = s.post("/v1/chat/completions", chat(system, turn),
                   timeout=SAFETY_NET_S)
        self.assertEqual(r.status, 200, r.body[:300])

    @staticmethod
    def systems_seen(up):
        return [json.loads(r.body)["messages"][0]["content"]
                for r in up.received()]

    def picks(self, s):
        text = s.get("/metrics").body.decode()
        return {result: st_metric(text, result)
                for result in ("hit", "busy", "miss")}

    def test_a_shared_beginning_goes_where_it_went_first(self):
        ups, s = self.start()
        a, b = system_prompt("a"), system_prompt("b")
        for turn in range(6):
            self.send(s, a, turn)
            self.send(s, b, turn)
        seen = [self.systems_seen(up) for up in ups]
        for system in (a, b):
            counts = [sum(1 for x in got if x == system) for got in seen]
            # All six on one replica, none on the other.
            self.assertEqual(sorted(counts), [0, 6], counts)
        # The first of each was a miss (nothing known), every later one a
        # hit.
        self.assertEqual(self.picks(s), {"hit": 10, "busy": 0, "miss": 2})

    def test_with_affinity_off_alike_requests_take_turns(self):
        ups, s = self.start("--affinity", "off")
        a = system_prompt("a")
        for turn in range(6):
            self.send(s, a, turn)
        self.assertEqual([len(self.systems_seen(up)) for up in ups], [3, 3])
        self.assertNotIn("sluice_affinity_picks_total",
                         s.get("/metrics").body.decode())


def st_metric(text, result):
    prefix = 'sluice_affinity_picks_total{result="%s"} ' % result
    for line in text.splitlines():
        if line.startswith(prefix):
            return int(line[len(prefix):])
    raise AssertionError("no %s line in /metrics" % prefix.strip())


if __name__ == "__main__":
    st.main()
