"""The facts the generator plants: for each slot, values, the wordings that state them and the wordings
that ask for them.

Questions are worded apart from the statements (a question about "my dog" for a statement about "a beagle
named Rufus"), so a search by the question's words does not simply find the statement. Values are
distinctive strings that occur nowhere in the filler (`filler.py`), so an answer found in a text comes
from the planted fact. Each slot is used at most once per conversation.
"""

from __future__ import annotations

from dataclasses import dataclass

MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


@dataclass(frozen=True)
class Slot:
    """One kind of fact. `statements` and `updates` hold `{v}` where the value goes."""

    key: str
    values: tuple[str, ...]
    statements: tuple[str, ...]
    questions: tuple[str, ...]
    #: How a later session states a changed value (slots of `updated` questions only).
    updates: tuple[str, ...] = ()


@dataclass(frozen=True)
class PairSlot:
    """A fact in two halves, stated in two sessions; the question needs both."""

    key: str
    first: Slot
    second: Slot
    questions: tuple[str, ...]


def _slot(key: str, values: str, statements: tuple[str, ...], questions: tuple[str, ...]) -> Slot:
    return Slot(key, tuple(v.strip() for v in values.split("|")), statements, questions)


SINGLE: tuple[Slot, ...] = (
    _slot(
        "dog",
        "Rufus|Biscuit|Juniper|Waffles|Ziggy|Marlowe|Pistachio",
        (
            "We finally adopted a beagle from the shelter, and we named him {v}.",
            "Our new puppy {v} chewed through my phone charger last night.",
            "I need to take {v}, our little terrier, to the groomer on the weekend.",
        ),
        ("What is my dog called?", "What's the name of our pet hound?"),
    ),
    _slot(
        "manager",
        "Henrietta Vogel|Desmond Okafor|Priyanka Raman|Lucian Marsh|Ingrid Halvorsen|Tobias Wrenfield",
        (
            "Since the reorganisation my new manager at work is {v}.",
            "{v} took over as head of my team this week.",
            "The person I report to now is {v}, who came over from the Berlin office.",
        ),
        ("Who is my boss?", "Who supervises me at my job?"),
    ),
    _slot(
        "door_code",
        "4817|9052|3368|7741|2295|6603",
        (
            "The entry code for our building's front door is {v}.",
            "Remind me later: the keypad at my apartment entrance takes {v}.",
        ),
        ("How do I get through the front entrance of my block?", "What digits open my apartment's door?"),
    ),
    _slot(
        "car",
        "Subaru Outback|Mazda CX-5|Volvo V60|Skoda Octavia|Kia Niro|Toyota Prius",
        (
            "I bought a used {v} last month and it drives beautifully.",
            "My {v} needs new tyres before winter.",
        ),
        ("What vehicle do I drive?", "Which automobile did I purchase?"),
    ),
    _slot(
        "hometown",
        "Ballymena|Tromsø|Kalispell|Aberystwyth|Oamaru|Whitehorse",
        (
            "I grew up in {v}, a small town far from everything.",
            "Whenever I smell pine I think of {v}, where I spent my childhood.",
        ),
        ("Where am I originally from?", "Which town was I raised in?"),
    ),
    _slot(
        "allergy",
        "cashews|shellfish|sesame|kiwi fruit|buckwheat|penicillin",
        (
            "I'm allergic to {v}, so I always have to check carefully.",
            "Last time I had {v} my throat swelled up, so I avoid it completely.",
        ),
        ("What am I allergic to?", "What gives me a bad reaction that I must avoid?"),
    ),
    _slot(
        "coffee",
        "flat white|cortado|cold brew|macchiato|chai latte|americano",
        (
            "My usual order at the cafe is a {v} with oat milk.",
            "Nothing beats a {v} first thing in the morning.",
        ),
        ("How do I take my morning drink?", "What do I usually get at the coffee shop?"),
    ),
    _slot(
        "author",
        "Ursula Le Guin|Kazuo Ishiguro|Octavia Butler|Terry Pratchett|Elena Ferrante|Italo Calvino",
        (
            "I've been rereading everything by {v}; nobody writes like that.",
            "My favourite writer has always been {v}.",
        ),
        ("Which novelist do I love most?", "Who is the author I admire the most?"),
    ),
    _slot(
        "kitchen_quote",
        "$18,400|$23,750|$12,900|$31,200|$16,850|$27,300",
        (
            "The contractor's quote for redoing the kitchen came in at {v}.",
            "Renovating the kitchen will cost {v}, according to the builder.",
        ),
        ("How much is the kitchen remodel going to cost?", "What price did the builder give us?"),
    ),
    _slot(
        "headcount",
        "37 people|52 people|84 people|126 people|19 people|63 people",
        (
            "Our startup has grown to {v} now.",
            "The company I work for employs {v} these days.",
        ),
        ("How big is the team at my company?", "How many staff does my employer have?"),
    ),
    _slot(
        "best_friend",
        "Marguerite|Oskar|Yusuf|Beatriz|Callum|Svetlana",
        (
            "My best friend {v} is flying in to visit next month.",
            "I've known {v} since primary school, we're still inseparable.",
        ),
        ("Who is my closest friend?", "Which pal have I known since childhood?"),
    ),
    _slot(
        "restaurant",
        "Osteria Lupo|The Copper Kettle|Sakura Garden|Casa Alvarez|Le Petit Moulin|Blue Lantern",
        (
            "We had dinner at {v} and it was the best meal in years.",
            "If you ever want a recommendation, {v} is my favourite place to eat.",
        ),
        ("Which restaurant do I like best?", "Where did we have that amazing dinner?"),
    ),
    _slot(
        "flight",
        "LH 4417|BA 2290|KL 1683|AF 7725|IB 3154|SK 9081",
        (
            "My flight is {v}, and it leaves horribly early.",
            "I'm booked on {v} for the trip.",
        ),
        ("What's my flight number?", "Which plane am I taking?"),
    ),
    _slot(
        "language",
        "Portuguese|Korean|Finnish|Swahili|Icelandic|Tagalog",
        (
            "I've started learning {v} on my lunch breaks.",
            "My evening class in {v} is harder than I expected.",
        ),
        ("Which foreign language am I studying?", "What tongue am I trying to pick up?"),
    ),
    _slot(
        "doctor",
        "Dr. Abernathy|Dr. Kowalczyk|Dr. Ferreira|Dr. Nakamura|Dr. Lindqvist|Dr. Oyelaran",
        (
            "My GP, {v}, wants me to get bloodwork done.",
            "I saw {v} about my knee and got some exercises.",
        ),
        ("What is my physician's name?", "Who is my family doctor?"),
    ),
    _slot(
        "school",
        "Willow Creek Elementary|St. Brendan's Primary|Maple Hill Academy|Riverside Montessori",
        (
            "My daughter just started at {v} and loves her teacher.",
            "Drop-off at {v} is chaos every single morning.",
        ),
        ("Which school does my kid attend?", "Where does my child go to class?"),
    ),
    _slot(
        "sport",
        "ultimate frisbee|water polo|curling|badminton|futsal|lacrosse",
        (
            "I joined a {v} league that plays on Thursdays.",
            "Our {v} team finally won a match last night.",
        ),
        ("What sport do I play each week?", "Which game does my weekly team compete in?"),
    ),
    _slot(
        "race_time",
        "1:52:10|2:04:37|1:47:55|2:11:03|1:58:42",
        (
            "I ran the half marathon in {v}, a personal best.",
            "My finishing time at the half marathon was {v}.",
        ),
        ("How fast did I complete the race?", "What was my result in the long-distance run?"),
    ),
    _slot(
        "band",
        "Khruangbin|Fleet Foxes|Arcade Fire|Portishead|Bonobo|Alvvays",
        (
            "I got tickets to see {v} live in the summer!",
            "I've had {v} on repeat all week.",
        ),
        ("Which group's music do I enjoy?", "What band am I into?"),
    ),
    _slot(
        "laptop",
        "ThinkPad X1|MacBook Air|Dell XPS 13|Framework 13|Surface Laptop",
        (
            "My {v} keeps overheating when I have too many tabs open.",
            "Work finally gave me a {v} to replace my old machine.",
        ),
        ("What computer do I use?", "Which notebook PC do I work on?"),
    ),
)


def _update(
    key: str, values: str, statements: tuple[str, ...], updates: tuple[str, ...], questions: tuple[str, ...]
) -> Slot:
    return Slot(key, tuple(v.strip() for v in values.split("|")), statements, questions, updates)


UPDATED: tuple[Slot, ...] = (
    _update(
        "move_city",
        "Lisbon|Copenhagen|Vancouver|Melbourne|Edinburgh|Montreal|Valencia|Zurich",
        ("We're planning to move to {v} next year.", "It's decided, we will relocate to {v} in the spring."),
        (
            "Change of plans: we're moving to {v} instead.",
            "Scrap what I said before, the move is to {v} now.",
        ),
        ("Which city are we relocating to?", "Where will we be living after the move?"),
    ),
    _update(
        "wedding_budget",
        "$14,000|$22,500|$9,800|$17,250|$26,000|$11,600",
        ("Our budget for the wedding is {v}.", "We can spend {v} on the wedding in total."),
        ("We had to revise the wedding budget, it's now {v}.", "New number for the wedding: {v}."),
        ("How much money can we put toward the ceremony?", "What have we set aside for getting married?"),
    ),
    _update(
        "job_title",
        "senior analyst|team lead|product owner|staff engineer|design director|head of research",
        ("I just got promoted to {v}!", "My title at work is {v}."),
        ("Another reshuffle at work: my title is now {v}.", "They changed my role again, I'm {v} now."),
        ("What is my current position at work?", "What's my job called these days?"),
    ),
    _update(
        "phone",
        "+44 7700 900431|+1 415 555 0187|+49 151 2394 8812|+61 412 555 903|+33 6 12 45 78 90",
        ("You can reach me on {v}.", "My mobile number is {v}."),
        ("I switched carriers, my new number is {v}.", "Update: my phone number changed to {v}."),
        ("What number can I be called on?", "How can someone ring me?"),
    ),
    _update(
        "spin_class",
        "6:15 am|7:30 pm|5:45 pm|8:00 am|12:30 pm",
        ("My spin class is at {v} on Mondays.", "I do indoor cycling every Monday at {v}."),
        ("They moved my spin class to {v}.", "The Monday cycling session now starts at {v}."),
        ("What time is my workout on the bike?", "When does my weekly gym session begin?"),
    ),
    _update(
        "rent",
        "€1,150|€1,420|€980|€1,675|€1,290|€2,050",
        ("Our rent is {v} a month.", "We pay {v} every month for the flat."),
        ("The landlord raised our rent to {v}.", "From next month the flat costs {v}."),
        ("What do we pay for housing monthly?", "How much does our apartment cost us?"),
    ),
    _update(
        "holiday",
        "Crete|Iceland|Sardinia|Kyoto|Patagonia|the Azores|Mallorca",
        ("For the summer trip we picked {v}.", "This year's vacation will be in {v}."),
        ("We switched the summer trip to {v}.", "Holiday plans changed, it's {v} now."),
        ("Where are we going on holiday this summer?", "What's our vacation destination?"),
    ),
)

#: Date statements: `{v}` is a day and month as the user wrote it.
DATED: tuple[Slot, ...] = (
    Slot(
        "dentist",
        (),
        ("My dentist appointment is on {v}.", "I finally booked the dentist for {v}."),
        ("When do I need to see the dentist?", "What day is my dental check-up?"),
    ),
    Slot(
        "wedding_date",
        (),
        ("My cousin's wedding is on {v}.", "Save the date: my cousin gets married on {v}."),
        ("What date is the family wedding?", "When is my cousin's ceremony?"),
    ),
    Slot(
        "review",
        (),
        ("My quarterly review got scheduled for {v}.", "HR set my performance review for {v}."),
        ("When is my appraisal meeting at work?", "What date is my evaluation?"),
    ),
    Slot(
        "lease",
        (),
        ("We signed the lease on {v}.", "The rental contract was signed on {v}."),
        ("When did we sign for the apartment?", "What day did we commit to the flat?"),
    ),
    Slot(
        "passport",
        (),
        ("My passport expires on {v}, I should renew it.", "Just noticed my passport runs out on {v}."),
        ("When is my travel document no longer valid?", "Until when can I travel abroad with my ID?"),
    ),
    Slot(
        "recital",
        (),
        ("The kids' piano recital is on {v}.", "Mark the calendar, the school recital is {v}."),
        ("On what day is the children's performance?", "When do the kids play their concert?"),
    ),
    Slot(
        "start_date",
        (),
        ("I start the new job on {v}.", "My first day at the new company is {v}."),
        ("When do I begin my new position?", "What date does my new employment start?"),
    ),
    Slot(
        "surgery",
        (),
        ("Mum's knee operation is planned for {v}.", "The hospital booked my mother's surgery on {v}."),
        ("When is my mother's procedure?", "What date is Mum going into hospital?"),
    ),
)

PAIRS: tuple[PairSlot, ...] = (
    PairSlot(
        "siblings",
        _slot(
            "brother",
            "Anselm|Dmitri|Fergus|Ignatius|Leopold",
            ("My brother {v} is coming to stay for a week.", "I had a long call with my brother {v}."),
            (),
        ),
        _slot(
            "sister",
            "Rosalind|Philippa|Annika|Theodora|Wilhelmina",
            ("My sister {v} got into medical school!", "My sister {v} is getting a new apartment."),
            (),
        ),
        ("What are my siblings' names?", "Who are my brother and sister?"),
    ),
    PairSlot(
        "conferences",
        _slot(
            "conf_one",
            "Ljubljana|Tallinn|Porto|Kraków|Bergen",
            ("For work I have a conference in {v} this spring.", "I'm giving a talk in {v} in April."),
            (),
        ),
        _slot(
            "conf_two",
            "Bilbao|Gdańsk|Lyon|Antwerp|Trieste",
            ("There's a second conference, in {v}, in the autumn.", "They also invited me to speak in {v}."),
            (),
        ),
        ("Which two cities are my work events in?", "Where do I have to travel for conferences?"),
    ),
    PairSlot(
        "children",
        _slot(
            "son",
            "Jasper|Emmett|Cassius|Rowan|Barnaby",
            ("My son {v} lost his first tooth today.", "My boy {v} scored a goal at practice."),
            (),
        ),
        _slot(
            "daughter",
            "Clementine|Odessa|Marigold|Esmeralda|Lavinia",
            ("My daughter {v} won the spelling bee!", "My girl {v} wants a hamster for her birthday."),
            (),
        ),
        ("What are my kids called?", "What are the names of my children?"),
    ),
    PairSlot(
        "pets",
        _slot(
            "cat",
            "Mittens|Saffron|Tofu|Nimbus|Clover",
            ("Our cat {v} knocked a glass off the table again.", "My tabby {v} sleeps on my keyboard."),
            (),
        ),
        _slot(
            "parrot",
            "Captain Polly|Kiwi Blue|Mango Jack|Sunny Boy|Rio Green",
            ("We also adopted a parrot, {v}, who whistles all day.", "Our parrot {v} learned a new word."),
            (),
        ),
        ("What are my feline and my bird called?", "What names do my cat and parrot have?"),
    ),
    PairSlot(
        "bike_costs",
        _slot(
            "bike_price",
            "£1,340|£890|£2,150|£1,075|£760",
            ("The new road bike cost me {v}.", "I paid {v} for the bicycle in the end."),
            (),
        ),
        _slot(
            "helmet_price",
            "£145|£89|£210|£65|£120",
            ("The helmet was another {v} on top.", "And a decent helmet came to {v}."),
            (),
        ),
        ("How much did I spend on cycling gear?", "What did my bike and head protection cost?"),
    ),
    PairSlot(
        "books",
        _slot(
            "book_one",
            "The Glass Orchard|A Winter Ledger|Salt and Cinder|The Quiet Cartographer",
            ("I finished reading '{v}' on the train.", "Just closed the last page of '{v}'."),
            (),
        ),
        _slot(
            "book_two",
            "Harbour of Small Hours|The Lantern Tithe|Nine Paper Rivers|An Atlas of Rain",
            ("Now I've started another novel, '{v}'.", "My book club picked '{v}' next."),
            (),
        ),
        ("Which books am I reading these weeks?", "What titles have I been reading lately?"),
    ),
)
