"""The prompt corpus of the SmolLM2 DFlash draft: written by the project, generated from a seed.

Every prompt is one user message built from a template and slot values in the lists below (all
written for this project; no outside text). Three categories, as a chat client sees them:

    chat   questions, advice, explanations, comparisons, everyday requests
    code   write / explain / fix / convert small programs (Python, JavaScript, C, shell, SQL, ...)
    prose  stories, poems, emails, descriptions, summaries of short passages written here

    prompts = build_corpus(seed=0)       # list of Prompt, deterministic for a seed
    train   = [p for p in prompts if p.split == "train"]
    heldout = heldout_prompts()          # the held-out split (HELDOUT_PER_CATEGORY per category)

The held-out split is drawn first, per category, from the shuffled distinct prompts; the training
split is every other distinct prompt, so no held-out text is ever trained on. The training targets
are not in this file: they are the target model's own continuations of these prompts
(tools/dflash_train/train.py generates them on the GPU).
"""
from __future__ import annotations

import random
from dataclasses import dataclass

CATEGORIES = ("chat", "code", "prose")
HELDOUT_PER_CATEGORY = 40
BASE_PER_CATEGORY = 2400   # the pool the held-out split is drawn from (see build_corpus)
DEFAULT_SEED = 0

# ---------------------------------------------------------------------------------------- slots

TOPICS = [
    "photosynthesis", "black holes", "the water cycle", "inflation", "compound interest", "vaccines",
    "the French Revolution", "plate tectonics", "machine learning", "climate change", "the immune system",
    "electric cars", "the stock market", "quantum computing", "the Roman Empire", "volcanoes",
    "renewable energy", "the human brain", "gravity", "DNA", "the internet", "blockchain", "sleep",
    "meditation", "the Renaissance", "coral reefs", "recycling", "the moon landing", "antibiotics",
    "supply and demand", "the solar system", "earthquakes", "nuclear power", "bees", "rainforests",
    "the printing press", "democracy", "jazz music", "the Great Wall of China", "tides", "rainbows",
    "the speed of light", "evolution", "the heart", "cloud computing", "solar panels", "batteries",
    "the ozone layer", "ancient Egypt", "the Olympic Games", "coffee", "chocolate", "volcanic islands",
    "glaciers", "deserts", "the periodic table", "magnets", "sound waves", "friction", "probability",
    "prime numbers", "the Pythagorean theorem", "taxes", "credit scores", "public speaking",
    "time management", "nutrition", "muscle growth", "the placebo effect", "memory", "languages",
]
TASKS = [
    "learn a new language", "save money each month", "start running", "cook rice", "plant a garden",
    "write a resume", "prepare for a job interview", "fall asleep faster", "make new friends",
    "study for an exam", "clean a laptop keyboard", "change a flat tire", "bake bread", "start a podcast",
    "organize my closet", "reduce stress", "learn to play guitar", "train a puppy", "paint a room",
    "plan a trip to Japan", "keep houseplants alive", "improve my handwriting", "stop procrastinating",
    "make a budget", "brew good coffee at home", "speak more confidently", "write a cover letter",
    "read more books", "drink more water", "set up a home office", "negotiate a salary",
    "prepare for a marathon", "take better photos with my phone", "memorize a speech", "learn to swim",
]
THINGS = [
    "working from home", "electric cars", "social media", "online learning", "living in a big city",
    "nuclear energy", "remote teams", "renting versus buying a house", "public transport",
    "a four-day work week", "smartphones for children", "open-source software", "fast food",
    "self-driving cars", "video games", "tea versus coffee", "paper books versus e-books",
    "freelancing", "solar power", "cash versus cards", "learning math early", "team sports",
]
FEELINGS = ["nervous", "excited", "worried", "unsure", "overwhelmed", "curious", "tired", "stuck"]
EVENTS = [
    "starting a new job", "moving to another city", "my first marathon", "giving a presentation",
    "going back to school", "meeting my partner's parents", "learning to drive", "a big exam next week",
    "adopting a cat", "my first day at university", "a long flight", "changing careers",
]
LANGUAGES = ["Python", "JavaScript", "C", "Rust", "Go", "Java", "TypeScript", "Bash", "C++", "Ruby"]
CODE_TASKS = [
    "reverses a string", "checks whether a number is prime", "computes the factorial of n",
    "returns the n-th Fibonacci number", "counts the words in a text", "sorts a list of numbers",
    "removes duplicates from a list", "finds the largest element of an array", "reads a file line by line",
    "converts Celsius to Fahrenheit", "checks whether a string is a palindrome", "merges two sorted lists",
    "computes the average of a list", "counts the vowels in a string", "flattens a nested list",
    "finds the greatest common divisor of two numbers", "generates a random password",
    "parses a CSV line into fields", "implements binary search", "computes the sum of the digits of a number",
    "capitalizes the first letter of every word", "checks whether two strings are anagrams",
    "returns the unique characters of a string", "transposes a matrix", "implements a stack",
    "counts how often each word appears", "validates an email address with a simple rule",
    "converts a decimal number to binary", "rotates a list by k positions", "implements bubble sort",
]
CODE_HOWTO = [
    "read a JSON file", "make an HTTP request", "handle exceptions", "write a loop over a dictionary",
    "define a class", "format a date", "split a string", "sort a list of objects by a field",
    "write unit tests", "use a hash map", "read command line arguments", "create a thread",
    "concatenate strings efficiently", "check if a file exists", "measure how long code takes",
]
SNIPPETS = [
    "def f(xs):\n    return [x * 2 for x in xs if x % 2 == 0]",
    "for i in range(1, 11):\n    print(i, i * i)",
    "def g(s):\n    return s == s[::-1]",
    "total = 0\nfor n in numbers:\n    total += n\nprint(total / len(numbers))",
    "const add = (a, b) => a + b;\nconsole.log([1, 2, 3].map(x => add(x, 10)));",
    "int max(int a, int b) {\n    return a > b ? a : b;\n}",
    "SELECT name, COUNT(*) FROM orders GROUP BY name ORDER BY COUNT(*) DESC;",
    "with open('data.txt') as f:\n    lines = [l.strip() for l in f]",
    "words = text.split()\ncounts = {}\nfor w in words:\n    counts[w] = counts.get(w, 0) + 1",
    "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a",
    "x = [3, 1, 2]\nx.sort()\nprint(x[-1])",
    "while True:\n    line = input()\n    if not line:\n        break\n    print(line.upper())",
]
BUGGY = [
    "def average(xs):\n    return sum(xs) / len(xs) + 1",
    "def is_even(n):\n    return n % 2 == 1",
    "for i in range(10)\n    print(i)",
    "def last(xs):\n    return xs[len(xs)]",
    "function square(x) {\n  return x * x\n}\nconsole.log(square('4' + 1));",
    "def count_a(s):\n    n = 0\n    for c in s:\n        if c == 'a':\n            n = 1\n    return n",
]
CHARACTERS = [
    "a young dragon", "a lonely robot", "a retired detective", "a curious cat", "a brave knight",
    "an old lighthouse keeper", "a girl who can talk to birds", "a tired baker", "a space explorer",
    "a shy wizard", "a clever fox", "a boy who finds a map", "a talking tree", "a pirate captain",
    "a village doctor", "an inventor", "a ghost in a library", "twin sisters", "a street musician",
]
PLOTS = [
    "loses something important", "discovers a secret door", "has to save the village",
    "learns to fly", "makes an unlikely friend", "travels back in time", "gets lost in a forest",
    "finds a message in a bottle", "enters a baking contest", "wakes up in another world",
    "must solve a mystery before sunset", "is afraid of the dark", "builds a machine",
]
PLACES = [
    "a busy market in the morning", "a quiet beach at sunset", "a snowy mountain village",
    "an old library", "a train station at night", "a summer garden", "a rainy city street",
    "a small coffee shop", "a desert under the stars", "a forest in autumn", "a crowded stadium",
]
RECIPIENTS = ["my manager", "a teacher", "a landlord", "a customer", "my team", "a friend", "a new client"]
SUBJECTS = [
    "a missed deadline", "a meeting next Monday", "a broken heater", "a refund request",
    "a project update", "taking a day off", "a job offer", "a thank-you for their help",
    "rescheduling an appointment", "a late payment",
]
POEM_TOPICS = ["the sea", "autumn leaves", "friendship", "the city at night", "rain", "the stars",
               "growing older", "a cup of tea", "the first snow", "mountains", "home", "a summer day"]
PASSAGES = [
    "The town council met on Tuesday to discuss the new bus routes. Many residents said the buses were "
    "often late, and the council agreed to add two more buses on the busiest line starting next month.",
    "Honeybees live in colonies of thousands. Worker bees collect nectar and pollen, the queen lays eggs, "
    "and drones mate with queens from other hives. In winter the bees cluster together to stay warm.",
    "The company reported higher sales this year, mainly because of strong demand for its new phone. "
    "However, costs also rose, so profits grew only a little. The company plans to open three new stores.",
    "Regular exercise improves sleep, mood and heart health. Experts suggest at least 150 minutes of "
    "moderate activity per week, such as brisk walking, cycling or swimming.",
    "The museum will close for renovation in March. During the closure, some of its paintings will be "
    "shown in the city library, and the museum café will stay open on weekends.",
    "A small team of volunteers cleaned the river bank last weekend. They collected more than two hundred "
    "bags of trash and planted fifty young trees along the water.",
]

# ------------------------------------------------------------------------------------ templates

TEMPLATES = {
    "chat": [
        ("What is {topic}?", ("topic",)),
        ("Can you explain {topic} in simple terms?", ("topic",)),
        ("Explain {topic} to a ten-year-old.", ("topic",)),
        ("Tell me three interesting facts about {topic}.", ("topic",)),
        ("Why is {topic} important?", ("topic",)),
        ("How do I {task}?", ("task",)),
        ("Give me some tips to {task}.", ("task",)),
        ("What is the best way to {task}?", ("task",)),
        ("I want to {task}. Where should I start?", ("task",)),
        ("What are the pros and cons of {thing}?", ("thing",)),
        ("Is {thing} a good idea?", ("thing",)),
        ("I feel {feeling} about {event}. Any advice?", ("feeling", "event")),
        ("I'm {feeling} about {event}. What can I do?", ("feeling", "event")),
        ("What is the difference between {topic} and {topic2}?", ("topic", "topic2")),
        ("Write a short list of questions I could ask about {topic}.", ("topic",)),
        ("Hi! Can you help me {task}?", ("task",)),
    ],
    "code": [
        ("Write a {language} function that {code_task}.", ("language", "code_task")),
        ("Write a {language} program that {code_task}.", ("language", "code_task")),
        ("How do I {code_howto} in {language}?", ("code_howto", "language")),
        ("Show me how to {code_howto} in {language} with an example.", ("code_howto", "language")),
        ("Explain what this code does:\n\n{snippet}", ("snippet",)),
        ("Can you rewrite this code in {language}?\n\n{snippet}", ("language", "snippet")),
        ("Find the bug in this code:\n\n{buggy}", ("buggy",)),
        ("Write a Python function that {code_task}, with a docstring and an example.", ("code_task",)),
        ("What is the time complexity of a function that {code_task}?", ("code_task",)),
        ("Write a unit test for a function that {code_task}.", ("code_task",)),
        ("In {language}, how would you write code that {code_task}?", ("language", "code_task")),
        ("Write a {language} function that {code_task} and explain how it works.", ("language", "code_task")),
        ("What is a simple way to {code_howto} in {language}? Show the code.", ("code_howto", "language")),
    ],
    "prose": [
        ("Write a short story about {character} who {plot}.", ("character", "plot")),
        ("Tell me a bedtime story about {character}.", ("character",)),
        ("Write a poem about {poem}.", ("poem",)),
        ("Write a haiku about {poem}.", ("poem",)),
        ("Describe {place} in one paragraph.", ("place",)),
        ("Write a short email to {recipient} about {subject}.", ("recipient", "subject")),
        ("Write a polite message to {recipient} about {subject}.", ("recipient", "subject")),
        ("Summarize this text in two sentences:\n\n{passage}", ("passage",)),
        ("Rewrite this text in simpler words:\n\n{passage}", ("passage",)),
        ("Write the opening paragraph of a novel set in {place}.", ("place",)),
        ("Write a short blog post about {topic}.", ("topic",)),
        ("Write a product description for {thing_product}.", ("thing_product",)),
        ("Write a short story about {character} who {plot} in {place}.", ("character", "plot", "place")),
        ("Write a {tone} poem about {poem}.", ("tone", "poem")),
        ("Write a {tone} story about {character} in {place}.", ("tone", "character", "place")),
        ("Write a {tone} paragraph describing {place}.", ("tone", "place")),
        ("Write a letter from {character} to {recipient}.", ("character", "recipient")),
        ("Write a {tone} email to {recipient} about {subject}.", ("tone", "recipient", "subject")),
    ],
}
SLOTS = {
    "topic": TOPICS, "topic2": TOPICS, "task": TASKS, "thing": THINGS, "feeling": FEELINGS, "event": EVENTS,
    "language": LANGUAGES, "code_task": CODE_TASKS, "code_howto": CODE_HOWTO, "snippet": SNIPPETS,
    "buggy": BUGGY, "character": CHARACTERS, "plot": PLOTS, "place": PLACES, "recipient": RECIPIENTS,
    "subject": SUBJECTS, "poem": POEM_TOPICS, "passage": PASSAGES,
    "tone": ["funny", "sad", "happy", "mysterious", "calm", "hopeful", "short", "gentle", "dramatic"],
    "thing_product": ["a reusable water bottle", "a pair of running shoes", "a desk lamp", "a backpack",
                      "a coffee grinder", "wireless headphones", "a notebook", "a board game"],
}


@dataclass(frozen=True)
class Prompt:
    id: str          # "<category>-<index>"
    category: str
    split: str       # "train" or "heldout"
    text: str        # the user message

    def messages(self) -> list[dict]:
        return [{"role": "user", "content": self.text}]


def _fill(template: str, slots: tuple, rng: random.Random) -> str:
    values = {}
    for s in slots:
        v = rng.choice(SLOTS[s])
        while s == "topic2" and v == values.get("topic"):
            v = rng.choice(SLOTS[s])
        values[s] = v
    return template.format(**values)


def build_corpus(seed: int = DEFAULT_SEED, per_category: int = BASE_PER_CATEGORY,
                 heldout_per_category: int = HELDOUT_PER_CATEGORY) -> list[Prompt]:
    """Distinct prompts per category (up to per_category, fewer if the templates run out).

    The first BASE_PER_CATEGORY distinct prompts of a category are shuffled and the first
    heldout_per_category of them held out; a larger per_category keeps that pool, its split and
    its ids as they are and appends the prompts drawn after it (from the same stream) to the
    training split, so a bigger corpus never moves a held-out prompt or trains on one.
    Deterministic for a seed."""
    out: list[Prompt] = []
    for ci, cat in enumerate(CATEGORIES):
        rng = random.Random(seed * 1000 + ci)
        seen: dict[str, None] = {}

        def draw(n: int) -> list[str]:
            before, tries = len(seen), 0
            while len(seen) < n and tries < n * 20:
                tries += 1
                tpl, slots = rng.choice(TEMPLATES[cat])
                seen.setdefault(_fill(tpl, slots, rng), None)
            return list(seen)[before:]

        texts = draw(min(per_category, BASE_PER_CATEGORY))
        rng.shuffle(texts)
        texts += draw(per_category) if per_category > BASE_PER_CATEGORY else []
        for i, t in enumerate(texts):
            out.append(Prompt(f"{cat}-{i}", cat, "heldout" if i < heldout_per_category else "train", t))
    return out


def heldout_prompts(seed: int = DEFAULT_SEED) -> list[Prompt]:
    """The held-out split (never trained on): HELDOUT_PER_CATEGORY prompts per category."""
    return [p for p in build_corpus(seed) if p.split == "heldout"]


if __name__ == "__main__":
    c = build_corpus()
    for cat in CATEGORIES:
        n = [p for p in c if p.category == cat]
        print(cat, len(n), "train", sum(p.split == "train" for p in n))
    for p in heldout_prompts()[:3]:
        print(repr(p))
