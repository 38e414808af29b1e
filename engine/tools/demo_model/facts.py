# The fixed material of the demo model's conversations: small talk, word lists, tool schemas, and the functions
# that turn a case's defining values into prompts, reasoning and exact answers.
import json
import re
from collections import namedtuple

NAME = "Strata Demo"

SYSTEM_PROMPTS = ["You are a helpful assistant.", f"You are {NAME}, a small local model.",
                  "Answer briefly and exactly.", "You are a friendly assistant running on this computer."]

# (user prompts, reply, reasoning)
CHAT = [
    (["Hi", "Hello", "Hello!", "Hi there", "Hey", "Good morning", "hello", "hi"],
     "Hello! How can I help you today?", "The user greets me. I greet them back and offer help."),
    (["How are you?", "How are you doing?", "How's it going?", "how are you"],
     "I'm doing well, thank you! How can I help you?", "The user asks how I am. I answer kindly."),
    (["What is your name?", "Who are you?", "What are you?", "Introduce yourself."],
     f"I am {NAME}, a small model that runs on your computer.", "The user asks who I am. I give my name."),
    (["What can you do?", "Help", "What do you know?", "How can you help me?"],
     "I can chat, add and multiply small numbers, count items, repeat text, and call tools for the weather, "
     "a calculator and unit conversion.", "The user asks what I can do. I list my skills."),
    (["Thank you", "Thanks!", "Thanks a lot", "thank you"],
     "You're welcome!", "The user thanks me. I say they are welcome."),
    (["Bye", "Goodbye", "See you later", "bye"],
     "Goodbye! Have a nice day.", "The user says goodbye. I say goodbye too."),
    (["Tell me a joke.", "Say something funny.", "Do you know a joke?"],
     "Why did the computer go to the doctor? It had a virus!", "The user wants a joke. I tell a short one."),
    (["Are you a robot?", "Are you human?", "Are you an AI?"],
     "I am an AI language model, not a human.", "The user asks what I am. I say I am an AI."),
    (["What is the capital of France?", "Capital of France?"],
     "The capital of France is Paris.", "The user asks for the capital of France. It is Paris."),
    (["Say hello in Spanish.", "How do you say hello in Spanish?"],
     "Hello in Spanish is \"Hola\".", "The user wants hello in Spanish. It is Hola."),
]


def pick_chat(rng):
    prompts, reply, thought = rng.choice(CHAT)
    return rng.choice(prompts), reply, thought


# ----------------------------------------------------------------------------------------------------------------
# Arithmetic: a + b and a - b with 0 <= a, b <= 99 (a >= b), a * b with 2 <= a, b <= 12.

def pick_arithmetic(rng, training=True):
    """(op, a, b, phrasing). Sums and differences are held out by their numbers (phrasing None), so held-out pairs
    are unseen; products are a memorised table (2..12 x 2..12), held out by phrasing only. Held-out cases draw
    the operator and both operands uniformly (as v1 did); training weights sums and differences over products and
    adds drills with one-digit operands, so each single-digit fact is seen in many contexts."""
    op = rng.choices("+-*", weights=(2, 2, 1) if training else (1, 1, 1))[0]
    if op == "*":
        return op, rng.randint(2, 12), rng.randint(2, 12), rng.randrange(len(ARITHMETIC_PROMPTS))
    a, b = rng.randint(0, 99), rng.randint(0, 99)
    if training and rng.random() < 0.2:
        a, b = (rng.randint(0, 9), rng.randint(0, 9)) if rng.random() < 0.5 else (a, rng.randint(0, 9))
    return (op, max(a, b), min(a, b), None) if op == "-" else (op, a, b, None)


ARITHMETIC_PROMPTS = ["What is {a} {op} {b}?", "Compute {a} {op} {b}.", "{a} {op} {b} = ?", "Calculate {a} {op} {b}.",
                      "What is {a} {word} {b}?", "How much is {a} {op} {b}?"]
OP_WORDS = {"+": "plus", "-": "minus", "*": "times"}


def column_steps(op, a, b):
    """(full, short) digit-by-digit working of a + b or a - b, ones column first, every step a one-digit fact;
    missing tens are 0. The tens result followed by the ones digit is the answer. v3: both ones digits are written
    before the borrow is decided ("Ones: 6 - 9: 6 is less than 9, borrow 1: ..."), the tens step is two two-term
    facts ("Tens: 3 + 7 = 10, 10 + 1 = 11."), and low effort (short) gets the same steps on one line."""
    a_ones, a_tens, b_ones, b_tens = a % 10, a // 10, b % 10, b // 10
    if op == "+":
        ones = a_ones + b_ones
        carry = ones // 10
        tens_sum = a_tens + b_tens
        lines = [f"Ones: {a_ones} + {b_ones} = {ones}. Write {ones % 10}, carry {carry}.",
                 f"Tens: {a_tens} + {b_tens} = {tens_sum}, {tens_sum} + {carry} = {tens_sum + carry}."]
    else:
        borrow = int(a_ones < b_ones)
        ones = a_ones + 10 * borrow - b_ones
        tens_difference = a_tens - b_tens
        if borrow:
            decision = f"{a_ones} is less than {b_ones}, borrow 1: {a_ones + 10} - {b_ones} = {ones}"
        else:
            decision = f"{a_ones} is not less than {b_ones}: {a_ones} - {b_ones} = {ones}"
        lines = [f"Ones: {a_ones} - {b_ones}: {decision}. Write {ones}, borrow {borrow}.",
                 f"Tens: {a_tens} - {b_tens} = {tens_difference}, "
                 f"{tens_difference} - {borrow} = {tens_difference - borrow}."]
    return "\n".join(lines), " ".join(lines)


def equation(op, a, b):
    result = {"+": a + b, "-": a - b, "*": a * b}[op]
    return f"{a} {op} {b} = {result}."


def thinking_off_answer(op, a, b):
    """v4: with thinking off, a sum or difference shows its working in the visible answer, on one line, word for
    word low effort's reasoning, then the result: "Ones: 7 - 3: 7 is not less than 3: 7 - 3 = 4. Write 4, borrow 0.
    Tens: 5 - 4 = 1, 1 - 0 = 1. So 57 - 43 = 14." A product stays the bare times-table fact."""
    if op == "*":
        return equation(op, a, b)
    return f"{column_steps(op, a, b)[1]} So {equation(op, a, b)}"


def arithmetic_texts(rng, op, a, b, phrasing=None):
    """(prompt, full reasoning, short reasoning, answer); the answer with thinking off is thinking_off_answer."""
    phrasing = rng.randrange(len(ARITHMETIC_PROMPTS)) if phrasing is None else phrasing
    prompt = ARITHMETIC_PROMPTS[phrasing].format(a=a, b=b, op=op, word=OP_WORDS[op])
    result = {"+": a + b, "-": a - b, "*": a * b}[op]
    answer = equation(op, a, b)
    if op == "*":
        full = short = f"From the times table, {a} times {b} is {result}."
    else:
        full, short = column_steps(op, a, b)
    return prompt, f"{full}\nSo {answer}", short, answer


# ----------------------------------------------------------------------------------------------------------------
# Counting: the items of a list, or the numbers from a to b.

ITEMS = ("apple pear plum fig grape lemon lime mango peach cherry melon kiwi orange banana carrot potato onion "
         "tomato pepper bean rice bread cheese milk egg fish cat dog bird horse cow sheep goat mouse lion tiger "
         "bear wolf fox frog duck owl chair table lamp door window book pen cup plate spoon fork knife box bag "
         "shoe hat coat shirt sock ring coin key map car bus train boat plane bike road river lake hill tree "
         "flower rock star moon sun cloud rain snow wind fire ice sand glass paper stone gold silver").split()


def pick_counting(rng, training=True):
    """A list of 2-9 items, or a range of 3-10 numbers. v4: training draws ranges half the time (held-out cases, as
    v2's and v3's: 30%); the one v3 counting miss, and 3 of 46 in a wider probe, were ranges run past or short of
    their end, while lists were right at every effort."""
    if rng.random() < (0.5 if training else 0.7):
        return ("items",) + tuple(rng.sample(ITEMS, rng.randint(2, 9)))
    start = rng.randint(0, 40)
    return ("range", start, start + rng.randint(2, 9))


def counting_texts(rng, key):
    """(prompt, full reasoning, short reasoning, answer). Items are numbered one by one in the reasoning; a range
    answer is the numbers themselves, so its reasoning only names where to start and stop."""
    if key[0] == "items":
        items = key[1:]
        prompt = rng.choice(["How many items are in this list: {l}?", "Count the items: {l}.",
                             "How many words are there in: {l}?"]).format(l=", ".join(items))
        steps = ", ".join(f"{item} {i + 1}" for i, item in enumerate(items)) + "."
        answer = f"There are {len(items)} items."
        return prompt, f"{steps}\nSo there are {len(items)} items.", steps, answer
    _, start, end = key
    prompt = rng.choice(["Count from {a} to {b}.", "Please count from {a} to {b}.", "List the numbers from {a} to {b}."]
                        ).format(a=start, b=end)
    answer = ", ".join(str(n) for n in range(start, end + 1)) + "."
    return prompt, f"Start at {start}, add 1 each time, and stop at {end}.", f"From {start} to {end}.", answer


# ----------------------------------------------------------------------------------------------------------------
# Copying

WORDS = ("the a blue red green small big quick slow happy sad bright dark old new cold warm soft loud quiet river "
         "mountain city garden ocean forest window morning evening night summer winter music story letter "
         "friend teacher doctor farmer runs jumps sings reads writes sleeps walks swims flies builds paints "
         "over under near behind with and but every seven three twelve purple silver golden tiny ancient "
         "strange gentle brave clever lazy busy empty full secret simple").split()
COPY_PROMPTS = ["Repeat after me: {text}", "Say exactly: {text}", "Copy this text: {text}",
                "Repeat this exactly: {text}", "Please echo: {text}"]


CODE_LETTERS = "ABCDEFGHJKLMNPQRSTUVWXYZ"
CODE = re.compile(r"[A-Z0-9]{2,5}(-[A-Z0-9]{2,5})*")


def pick_phrase(rng, training=True):
    """A phrase to copy: a random code (1-3 groups of 2-5 letters and digits) or 2-9 words (training: 1-12 words,
    so the held-out lengths are inside the trained range rather than at its edge)."""
    if rng.random() < 0.25:
        return "-".join("".join(rng.choice(CODE_LETTERS + "0123456789") for _ in range(rng.randint(2, 5)))
                        for _ in range(rng.randint(1, 3)))
    words = [rng.choice(WORDS) for _ in range(rng.randint(1, 12) if training else rng.randint(2, 9))]
    text = " ".join(words)
    return (text[0].upper() + text[1:] + ".") if rng.random() < 0.5 else text


def is_code(text) -> bool:
    """Random codes stay out of the tokenizer's training corpus, so they are encoded letter by letter (mostly),
    the same way in the prompt and in the answer."""
    return CODE.fullmatch(text) is not None


# ----------------------------------------------------------------------------------------------------------------
# Tools

def _tool(name, description, properties, required):
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required}}}


TOOLS = {
    "get_weather": _tool("get_weather", "Get the current weather in a city.",
                         {"city": {"type": "string", "description": "The city name, e.g. Paris"},
                          "unit": {"type": "string", "enum": ["celsius", "fahrenheit"],
                                   "description": "Temperature unit"}}, ["city"]),
    "calculator": _tool("calculator", "Evaluate an arithmetic expression.",
                        {"expression": {"type": "string", "description": "The expression, e.g. 12 * 7"}},
                        ["expression"]),
    "convert_units": _tool("convert_units", "Convert a value from one unit to another.",
                           {"value": {"type": "number", "description": "The value to convert"},
                            "from_unit": {"type": "string", "description": "The unit of the value"},
                            "to_unit": {"type": "string", "description": "The unit to convert to"}},
                           ["value", "from_unit", "to_unit"]),
    # distractors: offered, never needed
    "get_time": _tool("get_time", "Get the current time in a time zone.",
                      {"timezone": {"type": "string", "description": "IANA time zone"}}, ["timezone"]),
    "search_web": _tool("search_web", "Search the web.", {"query": {"type": "string"}}, ["query"]),
    "send_email": _tool("send_email", "Send an email.",
                        {"to": {"type": "string"}, "subject": {"type": "string"}, "body": {"type": "string"}},
                        ["to", "subject", "body"]),
}
TOOL_KIND = {"get_weather": "weather", "calculator": "calculator", "convert_units": "unit conversion"}
REAL_TOOLS = list(TOOL_KIND)
DISTRACTORS = ["get_time", "search_web", "send_email"]

CITIES = ("Paris London Berlin Madrid Rome Vienna Prague Warsaw Oslo Stockholm Helsinki Dublin Lisbon Athens "
          "Budapest Zurich Geneva Amsterdam Brussels Copenhagen Tokyo Osaka Seoul Beijing Shanghai Delhi Mumbai "
          "Bangkok Singapore Jakarta Sydney Melbourne Auckland Toronto Montreal Vancouver Chicago Boston Denver "
          "Seattle Austin Miami Lima Santiago Bogota Cairo Nairobi Lagos Istanbul Dubai Moscow Kyiv Riga Tallinn "
          "Vilnius Reykjavik Havana Manila Hanoi Taipei").split() + ["New York", "San Francisco", "Los Angeles",
                                                                    "Mexico City", "Buenos Aires", "Cape Town",
                                                                    "Hong Kong", "Rio de Janeiro"]
CONDITIONS = ["sunny", "cloudy", "rainy", "windy", "snowy", "foggy", "clear", "stormy"]
UNITS = {  # (from, to): factor
    ("km", "miles"): 0.621371, ("miles", "km"): 1.609344, ("kg", "pounds"): 2.204623, ("pounds", "kg"): 0.453592,
    ("meters", "feet"): 3.280840, ("feet", "meters"): 0.3048, ("liters", "gallons"): 0.264172,
    ("gallons", "liters"): 3.785412, ("inches", "cm"): 2.54, ("cm", "inches"): 0.393701,
}

ToolRequest = namedtuple("ToolRequest", "tool args prompt extra")


def pick_tool_request(rng):
    tool = rng.choice(REAL_TOOLS)
    if tool == "get_weather":
        city = rng.choice(CITIES)
        args = {"city": city}
        if rng.random() < 0.3:
            args["unit"] = rng.choice(["celsius", "fahrenheit"])
            prompt = rng.choice(["What's the weather in {c} in {u}?", "Weather in {c}, in {u} please.",
                                 "How warm is it in {c}? Use {u}."]).format(c=city, u=args["unit"])
        else:
            prompt = rng.choice(["What's the weather in {c}?", "What is the weather like in {c}?",
                                 "Is it cold in {c} right now?", "Weather in {c}?", "How is the weather in {c} today?"]
                                ).format(c=city)
        extra = (rng.randint(-10, 35), rng.choice(CONDITIONS))
    elif tool == "calculator":
        a, b, op = rng.randint(10, 9999), rng.randint(2, 999), rng.choice("+-*/")
        expression = f"{a} {op} {b}"
        args = {"expression": expression}
        prompt = rng.choice(["Use the calculator to compute {e}.", "Calculate {e} with the calculator.",
                             "What is {e}? Use the calculator tool."]).format(e=expression)
        extra = None
    else:
        (source, target), value = rng.choice(sorted(UNITS)), rng.randint(1, 500)
        args = {"value": value, "from_unit": source, "to_unit": target}
        prompt = rng.choice(["Convert {v} {f} to {t}.", "How many {t} is {v} {f}?", "What is {v} {f} in {t}?"]
                            ).format(v=value, f=source, t=target)
        extra = None
    return ToolRequest(tool, tuple(args.items()), prompt, extra)


def offered_tools(rng, needed, include_needed):
    pool = [t for t in REAL_TOOLS if t != needed]
    chosen = rng.sample(pool, rng.randint(0 if include_needed else 1, len(pool)))
    chosen += rng.sample(DISTRACTORS, rng.randint(0, 2))
    if needed and include_needed:
        chosen.append(needed)
    rng.shuffle(chosen)
    return chosen


def describe_args(args):
    return ", ".join(f"{k} {v}" for k, v in args.items())


def tool_reasoning(name, offered, args, short):
    """The check that decides between calling and refusing, written out: which tool is needed, which are offered.
    short (low effort) keeps only the decision."""
    kind = TOOL_KIND[name]
    if name in offered:
        decision = f"{name} is offered, so I call it with {describe_args(args)}."
    else:
        decision = f"{name} is not offered, so I can't get the {kind}."
    if short:
        return decision
    have = ", ".join(offered) if offered else "no tools"
    return f"The user needs the {kind} tool, {name}. I have {have}.\n{decision}"


def refusal_reply(name):
    return f"Sorry, I can't help with that: no {TOOL_KIND[name]} tool is available."


def _number(value):
    return f"{value:.3f}".rstrip("0").rstrip(".")


def tool_response(rng, request):
    """(tool response text, the exact final answer built from it)"""
    args = dict(request.args)
    if request.tool == "get_weather":
        celsius, condition = request.extra
        unit = args.get("unit", "celsius")
        temperature = celsius if unit == "celsius" else round(celsius * 9 / 5 + 32)
        symbol = "°C" if unit == "celsius" else "°F"
        fields = {"city": args["city"], "temperature": temperature, "unit": unit, "condition": condition}
        if rng.random() < 0.3:  # clients also send only the measurements
            fields = {"temperature": temperature, "condition": condition}
        response = json.dumps(fields)
        return response, f"It is {temperature}{symbol} and {condition} in {args['city']}."
    if request.tool == "calculator":
        a, op, b = args["expression"].split()
        a, b = int(a), int(b)
        result = {"+": a + b, "-": a - b, "*": a * b, "/": round(a / b, 3)}[op]
        result = _number(result) if isinstance(result, float) else str(result)
        return json.dumps({"result": result}), f"{args['expression']} = {result}."
    value, source, target = args["value"], args["from_unit"], args["to_unit"]
    result = _number(value * UNITS[(source, target)])
    return json.dumps({"value": result, "unit": target}), f"{value} {source} is {result} {target}."
