#!/usr/bin/env python3
# Regenerate with: python3 bench/data/make-sharegpt-sample.py > bench/data/sharegpt-sample.json
"""Writes a small ShareGPT-format sample for sluice-bench (--sharegpt).

Every word comes from the templates and word lists below: the text is
generated here, not taken from any data set. The output depends only on
SEED, so running the script again gives the same file byte for byte.

Each conversation has 1 to 4 user turns, each followed by a reply whose
length varies from one sentence to several paragraphs, so that replayed
conversations and --output-len-from-file see a spread of lengths.
"""

import json
import random
import sys

SEED = 31
CONVERSATIONS = 40

TOPICS = {
    "rivers": {
        "things": ["the Danube", "the Mekong", "the Rhine", "the Nile",
                   "the Amazon", "the Volga", "the Thames", "the Yukon"],
        "questions": [
            "Where does {t} begin, and where does it reach the sea?",
            "Why does {t} flood in some years and not in others?",
            "How long would it take to travel down {t} by boat?",
            "Which cities grew up along {t}, and why there?",
            "What lives in the water of {t}?",
        ],
        "facts": [
            "Its source is a cluster of small streams high in the hills",
            "Snowmelt in spring raises the water level for several weeks",
            "Barges carry grain and timber along the lower stretch",
            "Towns were built where the valley was easy to cross",
            "The delta shifts a little every year as silt settles",
            "Dams upstream have changed how much sediment reaches the coast",
            "Fish migrate upstream to spawn in the cooler tributaries",
        ],
    },
    "cooking": {
        "things": ["a loaf of sourdough", "risotto", "a vegetable curry",
                   "pancakes", "tomato soup", "roast potatoes", "dumplings",
                   "a lemon tart"],
        "questions": [
            "How do I make {t} at home?",
            "What goes wrong most often when people cook {t}?",
            "Can I prepare {t} the day before?",
            "What should I serve with {t}?",
            "How do I make {t} without eggs or dairy?",
        ],
        "facts": [
            "Start with ingredients at room temperature",
            "Salt early, since it needs time to work its way in",
            "A heavy pan spreads the heat and stops scorching",
            "Most of the flavour comes from browning, so do not rush it",
            "Rest it for ten minutes before serving",
            "Taste as you go and adjust the seasoning at the end",
            "A splash of acid at the end brightens the whole dish",
        ],
    },
    "code": {
        "things": ["a linked list in C", "a binary search", "a hash table",
                   "a Python decorator", "a shell script loop",
                   "a SQL join", "a regular expression for dates",
                   "a unit test"],
        "questions": [
            "Can you explain how {t} works?",
            "Write {t} and explain each step.",
            "What are the common bugs in {t}?",
            "How would I make {t} faster?",
            "When should I not use {t}?",
        ],
        "facts": [
            "Check the empty case first, since it is where most bugs hide",
            "Keep the loop invariant in mind at every step",
            "Free what you allocate, on every path out of the function",
            "Measure before you optimise; the slow part is rarely obvious",
            "Name things for what they hold, not for their type",
            "A small test for each edge case saves hours later",
            "Prefer the standard library when it already does the job",
        ],
    },
    "history": {
        "things": ["the printing press", "the Silk Road", "the Roman roads",
                   "the first railways", "the telegraph", "medieval guilds",
                   "the Hanseatic League", "early lighthouses"],
        "questions": [
            "How did {t} change daily life?",
            "Who was behind {t}, and why?",
            "What came before {t}?",
            "Why did {t} decline?",
            "What is a good book about {t}?",
        ],
        "facts": [
            "Trade was the main reason, more than any grand plan",
            "It took several generations for the change to spread",
            "Local rulers often resisted it at first",
            "Records from the time are patchy and often biased",
            "Merchants kept careful accounts that historians still read",
            "New routes made some towns rich and left others behind",
            "The technology itself was simple; organising it was hard",
        ],
    },
    "sky": {
        "things": ["the Moon's phases", "a solar eclipse", "the planet Mars",
                   "meteor showers", "the Milky Way", "comets",
                   "the northern lights", "Jupiter's moons"],
        "questions": [
            "Why do we see {t}?",
            "When is the best time to watch {t}?",
            "What equipment do I need to look at {t}?",
            "What causes {t}?",
            "What did people once believe about {t}?",
        ],
        "facts": [
            "A dark site away from city lights makes the biggest difference",
            "Binoculars show far more than most people expect",
            "Give your eyes twenty minutes to adapt to the dark",
            "The timing follows from simple orbital geometry",
            "Ancient observers tracked it carefully for their calendars",
            "Light from it takes minutes or years to reach us",
            "Weather matters more than any telescope",
        ],
    },
    "garden": {
        "things": ["tomatoes", "a herb garden", "roses", "a compost heap",
                   "fruit trees", "a vegetable bed", "houseplants",
                   "a small pond"],
        "questions": [
            "How do I start {t}?",
            "What usually goes wrong with {t}?",
            "What is the best month to start {t}?",
            "How often should I water {t}?",
            "How do I keep pests away from {t}?",
        ],
        "facts": [
            "Good soil does more than any fertiliser",
            "Water deeply and less often, early in the morning",
            "Most plants want at least six hours of sun",
            "Mulch keeps the roots cool and the weeds down",
            "Rotate crops so that pests do not build up",
            "Check the leaves weekly; problems are easy to fix early",
            "Start small and expand once you know what grows well",
        ],
    },
}

FOLLOW_UPS = [
    "Thanks. Can you say more about the second point?",
    "What would you do differently if you were starting out?",
    "Could you make that shorter?",
    "Is there anything I should avoid?",
    "How long does that usually take?",
    "Can you give me an example?",
    "Why does that matter?",
]

SYSTEM = "You are a patient assistant who answers briefly and plainly."

OPENERS = ["Good question.", "In short:", "Here is an overview.",
           "It depends a little, but broadly:", "Sure."]
CLOSERS = ["I hope that helps.", "Let me know if you want more detail.",
           "That is the gist of it.", ""]


def reply(rng, facts):
    """A reply of one sentence to a few paragraphs, from the topic's facts."""
    n = rng.choice([1, 2, 3, 4, 6, 9, 14])
    sentences = []
    while len(sentences) < n:
        sentences += [f + "." for f in rng.sample(facts, len(facts))]
    sentences = sentences[:n]
    paragraphs = []
    while sentences:
        k = rng.randint(2, 4)
        paragraphs.append(" ".join(sentences[:k]))
        sentences = sentences[k:]
    text = rng.choice(OPENERS) + " " + "\n\n".join(paragraphs)
    closer = rng.choice(CLOSERS)
    return text + ("\n\n" + closer if closer else "")


def conversation(rng, i):
    name = rng.choice(sorted(TOPICS))
    topic = TOPICS[name]
    thing = rng.choice(topic["things"])
    turns = []
    # Some files name the roles as OpenAI does, and some open with a
    # system turn; a few conversations here do the same.
    user, model = ("user", "assistant") if i % 10 == 7 else ("human", "gpt")
    for n in range(rng.choice([1, 1, 2, 2, 3, 4])):
        if n == 0:
            question = rng.choice(topic["questions"]).format(t=thing)
            question = question[0].upper() + question[1:]
        else:
            question = rng.choice(FOLLOW_UPS)
        turns.append({"from": user, "value": question})
        turns.append({"from": model, "value": reply(rng, topic["facts"])})
    if i % 10 == 5:
        turns.insert(0, {"from": "system", "value": SYSTEM})
    return {"id": "sluice-%s-%02d" % (name, i), "conversations": turns}


def main():
    rng = random.Random(SEED)
    data = [conversation(rng, i) for i in range(CONVERSATIONS)]
    json.dump(data, sys.stdout, indent=1, ensure_ascii=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
