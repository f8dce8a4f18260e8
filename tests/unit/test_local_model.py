"""The offline `om-local/extractive` model, called through the real `litellm.completion`.

Prompts are built with the engine's own prompt builders and answers are read back with the engine's own
parsers, so these tests prove the local model is a drop-in Observer/Reflector, not just a text generator.
"""

from __future__ import annotations

# Imported before litellm: the package pins litellm to its bundled price table (no download at import).
import om_core.models  # noqa: F401

# isort: split
import asyncio
import re
from collections.abc import Sequence
from datetime import UTC, datetime

import litellm
import pytest

from om_core.messages import Message, Part, text_message
from om_core.observer.input import observer_user_content, render_histories
from om_core.observer.prompt import (
    ObserverPromptOptions,
    PriorThreadMetadata,
    build_observer_system_prompt,
    build_observer_user_message,
    parse_multi_thread_output,
    parse_observer_output,
    render_thread_blocks,
)
from om_core.observer.transcript import render_transcript
from om_core.reflector.prompt import (
    ReflectorPromptOptions,
    build_reflector_system_prompt,
    build_reflector_user_message,
    parse_reflector_output,
)
from om_core.tokens import default_estimator
from om_local.extractive import local_reply, register_local_models
from om_local.observer import has_fact, observe_transcript, shorten
from om_local.reflector import count_tokens, parse_target, reflect_observations
from om_local.salience import Tier, is_correction, salience, supersedes

MODEL = "om-local/extractive"
OBSERVATION_LINE = re.compile(r"^\* (?:🔴|🟡|🟢|✅) \((?:[01]\d|2[0-3]):[0-5]\d\) \S")
NESTED_LINE = re.compile(r"^  \* -> \S")


def _at(day: int, hour: int, minute: int) -> datetime:
    return datetime(2025, 12, day, hour, minute, tzinfo=UTC)


# --- a realistic conversation -------------------------------------------------------------------------------

USER_1 = """Hi there! Okay, so this is going to be a bit of a ramble, sorry in advance. The last few weeks \
have honestly been a whirlwind and I'm only now starting to feel like a normal person again. You know how it \
is when everything piles up at once and you just kind of go along with it and hope for the best.

Anyway, the big news is that I moved to Porto on March 3, so I'm still figuring out the neighbourhood, the \
buses, where the good bakeries are, all of that. The flat is lovely, a little small, but the light in the \
mornings is wonderful and I can hear the trams from the window, which I weirdly enjoy. My dog is called \
Biscuit and he's been adjusting surprisingly well, he already has a favourite bench by the river where he \
likes to sit and watch the seagulls for ages.

Now that things are calmer I want to plan a proper trip for the spring, nothing too wild, maybe somewhere in \
Spain. Our budget is 2400 euros for the whole thing, including transport, so it needs to stay reasonable. \
Oh, and before I forget, I'm allergic to peanuts, so anything involving food tours has to take that into \
account, it's a fairly serious allergy.

Where would you even start with something like this? There are so many blogs and lists out there and they \
all say slightly different things, and I end up with forty tabs open and no decision."""

ASSISTANT_1 = """What a lovely update — congratulations on the move! Porto is a wonderful base for exploring \
the Iberian peninsula, and it sounds like Biscuit has already found his favourite spot, which is always a \
good sign that a dog feels at home.

Planning a spring trip with a fixed budget is much easier if you make a few big decisions first and let the \
details follow. Here is how I would approach it:

1. **Decide on the travel mode.** Since you will be travelling with a dog, trains and buses are usually far \
less stressful than flying. Most Spanish and Portuguese rail operators allow small dogs in a carrier for a \
modest fee, and larger dogs on some regional routes with a muzzle and lead. Check the current rules before \
booking, because they change occasionally.
2. **Pick a region rather than a single city.** Andalusia, for example, lets you combine two or three cities \
with short train hops, which spreads the cost of accommodation and keeps travel days short.
3. **Set a daily budget.** With 2400 euros in total, a sensible split for a ten-day trip might be around 900 \
euros for accommodation, 400 euros for transport, 700 euros for food and 400 euros for activities and a \
safety margin.
4. **Shortlist dog-friendly accommodation early.** Pet-friendly apartments in popular areas book out quickly \
in spring, especially around Easter and local festivals.
5. **Plan food around your allergy.** Peanuts are not very common in traditional Spanish cooking, but they \
do appear in some desserts, sauces and in many international restaurants. Carrying an allergy card in \
Spanish that explains the severity is a simple, reliable way to communicate it in restaurants and bakeries.

A good next step would be to tell me roughly which dates you are considering and whether you prefer big \
cities, smaller towns, or a mix, and I can suggest two or three concrete itineraries that fit your budget."""

USER_2 = """Oh that's super helpful, thank you! The allergy card idea is genius, I can't believe I never \
thought of that before, I always end up doing this awkward mime in restaurants which is not ideal.

So dates-wise, I think we'd go for about ten days, probably from April 14 to April 24, because that's when I \
can take time off work. I work as a translator, so I'm fairly flexible in general, but I have a big deadline \
at the end of March and I really don't want to be travelling while I'm stressed about that.

My partner Tomás is coming too. He prefers quieter neighbourhoods and really hates crowds, so somewhere away \
from the main tourist areas would be ideal for both of us. He's vegetarian, by the way, which I guess is \
another thing to keep in mind for restaurants. Could you look for a dog-friendly apartment in a calm area of \
Seville for those dates?"""

ASSISTANT_2 = """Great, that gives me a lot to work with. Seville in mid-April is beautiful, with orange \
blossom everywhere, but one thing to be aware of is that Holy Week (Semana Santa) and the April Fair (Feria \
de Abril) both fall around that period, so the historic centre will be extremely busy with processions, \
music and visitors until late at night. Given that Tomás prefers quiet areas, I would look at Triana or Los \
Remedios, which are across the river from the centre, well connected, and noticeably calmer in the \
evenings.

I found two good options that match what you described. The Casa Azul apartment in Triana costs 85 euros \
per night, allows dogs of any size, and is a five-minute walk from the river promenade, which would be \
perfect for Biscuit's morning walks. The Jardín apartment in Los Remedios costs 95 euros per night and has a \
small private patio, which is nice if you want to eat breakfast outside without taking the dog anywhere.

For ten nights, Casa Azul would come to about 850 euros and Jardín to about 950 euros, so both fit \
comfortably inside the accommodation part of your budget. Triana also has several vegetarian-friendly tapas \
bars, so Tomás would have good options close by, and most places there are used to questions about \
allergies. Shall I check the train and bus connections from Porto for April 14?"""

USER_3 = """Yes please, that would be amazing! Let's go with Casa Azul, the river walk sounds perfect for \
Biscuit and I love the idea of being close to the water. Thanks so much, this is so much less stressful than \
doing it all by myself."""

USER_4 = """Morning! Quick update: Biscuit had his vaccinations yesterday at the vet, and he's all good to \
travel now, which is a relief because I was a bit nervous about it. Tomás has been reading about Seville \
non-stop, he's so excited, he keeps sending me photos of the Plaza de España at midnight haha.

One more thing though, I'd really rather avoid overnight buses if at all possible. I never sleep on them and \
I'm a complete zombie the next day, which would kind of ruin the first day of the holiday. What's the best \
daytime option to get there?"""

ASSISTANT_4 = """Good morning, and that's great news about Biscuit — having the vaccinations sorted well \
ahead of the trip takes a lot of pressure off.

Avoiding the overnight bus is very doable. The most comfortable daytime route is to take the morning Alfa \
Pendular train from Porto Campanhã to Lisbon Oriente, which takes about three hours, and then continue by \
bus from Lisbon Oriente to Seville's Plaza de Armas station. The bus leg takes around six and a half hours, \
and there are usually two daytime departures, one in the morning and one in the early afternoon. If you \
catch a train around 7 in the morning, you can connect to the early afternoon bus and reach Seville in the \
evening.

A few practical points for travelling with Biscuit on this route:

- Portuguese trains allow dogs, but larger dogs need a muzzle and a lead and you pay a reduced fare for \
them, so bring both even if he is normally relaxed.
- Long-distance buses vary by operator. Some accept small dogs in a carrier only, so it is worth calling \
ahead or booking a seat with an operator that explicitly allows pets.
- Pack water, a collapsible bowl and a few treats; the connection in Lisbon is a good moment for a short \
walk outside the station.

If the bus rules turn out to be too restrictive for Biscuit, an alternative is to hire a car in Porto for \
the day. The drive is roughly six hours via Badajoz, which gives you full flexibility for breaks, and \
splitting the fuel and tolls between you and Tomás keeps it within your transport budget. Would you like \
me to compare the costs of the train-and-bus route with the car option?"""

USER_5 = """Oh nice, the train plus bus sounds good to me, let's try that first. Thanks again for all of \
this, you've been an absolute lifesaver! I'll let you know how it all goes, and I'll definitely send you a \
photo of Biscuit by the river haha."""

ASSISTANT_5 = """You're very welcome — it has been a pleasure helping you plan this! The train and bus \
combination is a great choice, and with Casa Azul booked near the river you'll have an easy first evening. \
I hope you, Tomás and Biscuit have a wonderful time in Seville, and I'd love to hear how it goes. Enjoy the \
orange blossom!"""


def _chat() -> list[Message]:
    return [
        text_message("u1", "user", USER_1, _at(4, 14, 30)),
        text_message("a1", "assistant", ASSISTANT_1, _at(4, 14, 31)),
        text_message("u2", "user", USER_2, _at(4, 14, 40)),
        text_message("a2", "assistant", ASSISTANT_2, _at(4, 14, 41)),
        text_message("u3", "user", USER_3, _at(5, 9, 5)),
        text_message(
            "a3", "assistant", "Wonderful choice! I'll put together the travel options next.", _at(5, 9, 6)
        ),
        text_message("u4", "user", USER_4, _at(6, 8, 15)),
        text_message("a4", "assistant", ASSISTANT_4, _at(6, 8, 16)),
        text_message("u5", "user", USER_5, _at(6, 8, 30)),
        text_message("a5", "assistant", ASSISTANT_5, _at(6, 8, 31)),
    ]


def _transcript(messages: list[Message]) -> str:
    return render_transcript(messages, "UTC").text


def _observer_prompt(
    transcript: str,
    *,
    include_hints: bool = True,
    thread_title: bool = False,
    previous: str = "",
    prior_task: str | None = None,
) -> tuple[str, str]:
    system = build_observer_system_prompt(
        ObserverPromptOptions(thread_title=thread_title, include_hints=include_hints)
    )
    user = build_observer_user_message(
        transcript=transcript,
        previous_observations=previous,
        previous_truncated=False,
        prior_current_task=prior_task,
        prior_suggested_response=None,
        prior_thread_title=None,
        include_hints=include_hints,
    )
    return system, user


def _complete(system: str, user: str) -> litellm.ModelResponse:
    register_local_models()
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    return litellm.completion(model=MODEL, messages=messages, temperature=0.3, num_retries=0)


def _text(response: litellm.ModelResponse) -> str:
    content = response.choices[0].message.content
    assert isinstance(content, str)
    return content


def _observe(transcript: str, **options: object) -> str:
    return _text(_complete(*_observer_prompt(transcript, **options)))  # type: ignore[arg-type]


def _o200k(text: str) -> int:
    return default_estimator()(text)


# --- registration -------------------------------------------------------------------------------------------


def test_registration_is_idempotent() -> None:
    register_local_models()
    register_local_models()
    entries = [entry for entry in litellm.custom_provider_map if entry["provider"] == "om-local"]
    assert len(entries) == 1


def test_usage_is_reported_and_costs_nothing() -> None:
    system, user = _observer_prompt(_transcript(_chat()))
    response = _complete(system, user)
    usage = response.usage
    assert usage.prompt_tokens == count_tokens(system) + count_tokens(user)
    assert usage.completion_tokens == count_tokens(_text(response))
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert litellm.completion_cost(completion_response=response) == 0.0


def test_streamed_and_async_calls_give_the_same_answer() -> None:
    register_local_models()
    messages = [
        {"role": "user", "content": "## New Message History to Observe\n\n" + _transcript(_chat()[:2])}
    ]
    plain = _text(litellm.completion(model=MODEL, messages=messages))
    streamed = "".join(
        chunk.choices[0].delta.content or ""
        for chunk in litellm.completion(model=MODEL, messages=messages, stream=True)
    )

    async def both() -> tuple[str, str]:
        answer = await litellm.acompletion(model=MODEL, messages=messages)
        stream = await litellm.acompletion(model=MODEL, messages=messages, stream=True)
        pieces = [chunk.choices[0].delta.content or "" async for chunk in stream]
        return _text(answer), "".join(pieces)

    async_plain, async_streamed = asyncio.run(both())
    assert plain.startswith("<observations>\nDate: Dec 4, 2025")
    assert streamed == async_plain == async_streamed == plain


# --- observer mode ------------------------------------------------------------------------------------------


def test_observer_output_parses_with_the_engines_parser() -> None:
    text = _observe(_transcript(_chat()))
    parsed = parse_observer_output(text)
    assert not parsed.degenerate
    assert parsed.dropped_lines == ()
    lines = parsed.observations.splitlines()
    assert lines[0] == "Date: Dec 4, 2025"
    assert {"Date: Dec 5, 2025", "Date: Dec 6, 2025"} <= set(lines)
    for line in lines:
        assert line.startswith("Date: ") or OBSERVATION_LINE.match(line) or NESTED_LINE.match(line), line
    assert parsed.current_task and parsed.current_task.startswith("- Primary: ")
    assert parsed.suggested_response
    assert parsed.thread_title is None


def test_observer_is_deterministic() -> None:
    system, user = _observer_prompt(_transcript(_chat()))
    assert _text(_complete(system, user)) == _text(_complete(system, user))


def test_observer_compresses_conversation_at_least_five_times_in_o200k_tokens() -> None:
    transcript = _transcript(_chat())
    observations = parse_observer_output(_observe(transcript)).observations
    assert _o200k(transcript) >= 5 * _o200k(observations), (_o200k(transcript), _o200k(observations))


@pytest.mark.parametrize(
    "fact",
    [
        "their dog is called Biscuit",
        "they moved to Porto on March 3",
        "they're allergic to peanuts",
        "budget is 2400 euros",
        "April 14 to April 24",
        "vegetarian",
        "let's go with Casa Azul",
        "they'd rather avoid overnight buses",
    ],
)
def test_planted_facts_survive_the_chatter(fact: str) -> None:
    observations = parse_observer_output(_observe(_transcript(_chat()))).observations
    assert fact in observations


def test_chatter_is_dropped() -> None:
    observations = parse_observer_output(_observe(_transcript(_chat()))).observations
    for chatter in ("forty tabs", "whirlwind", "awkward mime", "zombie", "lifesaver"):
        assert chatter not in observations


def test_user_statements_are_red_and_questions_without_a_value_medium() -> None:
    observations = parse_observer_output(_observe(_transcript(_chat()))).observations
    assert "* 🔴 (14:30) User stated they moved to Porto on March 3" in observations
    # A question holding no value is medium, as in the seed's example ("🟡 User asked about middleware …")
    assert "* 🟡 (14:30) User asked: Where would you even start with something like this?" in observations
    assert "asked: What's the best daytime option to get there?" in observations


def test_assistant_messages_become_one_medium_line_each() -> None:
    observations = parse_observer_output(_observe(_transcript(_chat()))).observations
    assistant_lines = [line for line in observations.splitlines() if " Assistant" in line]
    assert all(line.startswith("* 🟡 ") for line in assistant_lines)
    assert len(assistant_lines) == 5
    assert "Decide on the travel mode" in observations
    assert "Alfa Pendular" in observations


@pytest.mark.parametrize(
    ("label", "expected"),
    [("2:30 PM", "(14:30)"), ("12:05 AM", "(00:05)"), ("12:30 PM", "(12:30)"), ("9:07 AM", "(09:07)")],
)
def test_transcript_times_become_24_hour_times(label: str, expected: str) -> None:
    transcript = f"Mar 3 2026:\nUser ({label}): My flight to Oslo leaves on Friday."
    assert f"* 🔴 {expected} User stated their flight to Oslo leaves on Friday" in observe_transcript(
        transcript
    )


def test_dates_use_the_header_format_and_follow_date_lines() -> None:
    transcript = (
        "Feb 28 2026:\nUser (11:59 PM): I adopted a cat named Miso.\n"
        "Mar 1 2026:\nUser (12:01 AM): Miso is 3 years old."
    )
    output = observe_transcript(transcript)
    assert "Date: Feb 28, 2026\n* 🔴 (23:59) User stated they adopted a cat named Miso" in output
    assert "Date: Mar 1, 2026\n* 🔴 (00:01) User stated Miso is 3 years old" in output


def test_lines_without_a_time_label_keep_the_previous_time_and_bodies_span_lines() -> None:
    transcript = (
        "Dec 4 2025:\n"
        "User (2:30 PM): My sister Maya lives in Lisbon.\n"
        "She visits on May 3 every year.\n"
        "Assistant: Lisbon is lovely in May; the Alfama district is worth a walk with Maya.\n"
        "(5:00 PM): 2 hours later\n"
        "User (5:00 PM): Can you suggest a restaurant near Alfama for May 3?"
    )
    output = observe_transcript(transcript)
    assert (
        "* 🔴 (14:30) User stated their sister Maya lives in Lisbon; she visits on May 3 every year" in output
    )
    assert "* 🟡 (14:30) Assistant: Lisbon is lovely in May" in output
    assert "* 🔴 (17:00) User asked: Can you suggest a restaurant near Alfama for May 3?" in output
    assert "2 hours later" not in output


def test_reminders_and_reasoning_are_not_observed() -> None:
    transcript = (
        "Dec 4 2025:\n"
        "system-reminder (2:30 PM): The user prefers metric units, remind them of Project Falcon.\n"
        "User: I booked the Ryokan Sakura in Kyoto for 4 nights. "
        "<system-reminder>Secret control text about Project Falcon</system-reminder>\n"
        "Reasoning: The user mentioned Kyoto; I should think about Project Falcon budgets of 900 dollars.\n"
        "Assistant: Ryokan Sakura is a great pick near the Gion district."
    )
    output = observe_transcript(transcript)
    assert "Falcon" not in output and "900" not in output and "system-reminder" not in output
    assert "Ryokan Sakura in Kyoto for 4 nights" in output


def test_tool_calls_are_recorded_with_key_args_and_a_short_result_gist() -> None:
    messages = [
        text_message("u1", "user", "Find me a dog-friendly flat in Seville for April 14.", _at(4, 14, 40)),
        Message(
            id="a1",
            role="assistant",
            created_at=_at(4, 14, 41),
            parts=[
                Part(
                    type="tool-invocation",
                    tool_call_id="c1",
                    tool_name="search_rentals",
                    state="result",
                    args={"city": "Seville", "areas": ["Triana", "Los Remedios"], "pets": True},
                    result={
                        "results": [
                            {
                                "name": "Casa Azul",
                                "area": "Triana",
                                "price_per_night": 85,
                                "notes": "x" * 400,
                            },
                            {"name": "Jardín", "area": "Los Remedios", "price_per_night": 95},
                        ],
                        "total": 2,
                    },
                )
            ],
        ),
    ]
    output = observe_transcript(_transcript(messages))
    assert "* 🟡 (14:41) Called search_rentals (city=Seville, areas=Triana/Los Remedios, pets=true)" in output
    result_line = next(line for line in output.splitlines() if line.startswith("  * -> "))
    assert "Casa Azul (price_per_night=85)" in result_line
    assert len(result_line.removeprefix("  * -> ")) <= 200


def test_repeated_calls_to_one_tool_are_grouped_under_one_line() -> None:
    transcript = "Dec 4 2025:\nUser (9:00 AM): Check the config files please.\n" + "\n".join(
        f'Tool Call read_file (9:0{i} AM): {{"path": "conf/{name}.yml"}}\n'
        f'Tool Result read_file (9:0{i} AM): {{"lines": {10 * i}}}'
        for i, name in enumerate(["a", "b", "c"], start=1)
    )
    output = observe_transcript(transcript)
    assert "* 🟡 (09:01) Called read_file 3 times" in output
    assert "  * -> path=conf/b.yml: lines=20" in output
    assert output.count("Called read_file") == 1


def test_tool_errors_and_denials_are_nested_under_their_call() -> None:
    transcript = (
        "Dec 4 2025:\n"
        'Tool Call deploy (9:00 AM): {"env": "prod"}\n'
        "Tool Denied deploy (9:00 AM): Tool call was not approved by the user\n"
        'Tool Call migrate (9:01 AM): {"version": 42}\n'
        "Tool Error migrate (9:01 AM): relation users already exists"
    )
    output = observe_transcript(transcript)
    assert "Called deploy (env=prod)\n  * -> denied: Tool call was not approved by the user" in output
    assert "Called migrate (version=42)\n  * -> error: relation users already exists" in output


def test_relative_dates_are_resolved_at_the_end_of_the_line() -> None:
    transcript = "Mar 4 2026:\nUser (10:00 AM): I started my new job at Acme yesterday."
    assert "(meaning March 3, 2026)" in observe_transcript(transcript).splitlines()[2]


def test_hints_are_left_out_when_the_prompt_asks_for_observations_only() -> None:
    text = _observe(_transcript(_chat()), include_hints=False)
    assert "<current-task>" not in text and "<suggested-response>" not in text
    assert parse_observer_output(text).observations


def test_a_thread_title_is_added_only_when_asked_for() -> None:
    titled = parse_observer_output(_observe(_transcript(_chat()), thread_title=True))
    assert titled.thread_title is not None
    assert 2 <= len(titled.thread_title.split()) <= 5
    assert parse_observer_output(_observe(_transcript(_chat()))).thread_title is None


def test_current_task_follows_the_latest_user_request() -> None:
    text = _observe(_transcript(_chat()[:3]))
    parsed = parse_observer_output(text)
    assert parsed.current_task is not None
    assert "Could you look for a dog-friendly apartment" in parsed.current_task
    assert parsed.suggested_response is not None
    assert parsed.suggested_response.startswith("Answer the user's latest message")


def test_a_prior_task_is_carried_when_nothing_new_is_asked() -> None:
    transcript = "Dec 4 2025:\nAssistant (9:00 AM): The migration finished in 42 seconds."
    parsed = parse_observer_output(_observe(transcript, prior_task="- Primary: migrate the users table"))
    assert parsed.current_task == "- Primary: migrate the users table"
    assert parsed.suggested_response == "Wait for the user's reply before continuing."


def test_previous_observations_are_not_repeated() -> None:
    transcript = "Dec 4 2025:\nUser (2:30 PM): My dog is called Biscuit. I moved to Porto on March 3."
    previous = "Date: Dec 1, 2025\n* 🔴 (10:00) User stated their dog is called Biscuit"
    observations = parse_observer_output(_observe(transcript, previous=previous)).observations
    assert "Porto" in observations
    assert "Biscuit" not in observations


def test_multi_thread_prompts_get_one_block_per_thread() -> None:
    transcripts = {
        "t-1": "Dec 4 2025:\nUser (9:00 AM): My daughter Ana starts school on September 8.",
        "t-2": "Dec 4 2025:\nUser (9:30 AM): Our router model is the Fritz 7590.",
    }
    system = build_observer_system_prompt(ObserverPromptOptions(thread_title=False, multi_thread=True))
    user = build_observer_user_message(
        transcript=render_thread_blocks(transcripts),
        previous_observations="",
        previous_truncated=False,
        prior_current_task=None,
        prior_suggested_response=None,
        prior_thread_title=None,
        include_hints=True,
        multi_thread=True,
        prior_by_thread={"t-1": PriorThreadMetadata(current_task="- Primary: school prep")},
    )
    parsed = parse_multi_thread_output(_text(_complete(system, user)))
    assert "Ana starts school on September 8" in parsed.for_thread("t-1").observations
    assert "Fritz 7590" in parsed.for_thread("t-2").observations
    assert "Fritz" not in parsed.for_thread("t-1").observations
    assert parsed.for_thread("t-2").current_task


def test_a_transcript_of_pure_chatter_still_yields_one_line() -> None:
    output = observe_transcript("Dec 4 2025:\nUser (9:00 AM): haha ok thanks!")
    assert "* 🟢 (09:00) User said: thanks!" in output


# --- reflector mode -----------------------------------------------------------------------------------------

LOG = """\
Date: Nov 2, 2025
* 🔴 (09:12) User stated their team deploys on Fridays only and has 7 engineers
* 🟡 (09:15) Agent inspected the CI configuration in .github/workflows/deploy.yml, found an approval step
  * -> viewed deploy.yml lines 10-42, found a manual approval step
  * -> ran a dry run, 2 jobs skipped because the secret DEPLOY_KEY is missing
* 🟢 (09:16) User seemed mildly annoyed by the slow pipeline
* 🔴 (09:20) User asked how to add the secret without admin rights
* ✅ (09:31) Secret added through environment-scoped settings; user confirmed the dry run is green
* 🟡 (09:40) Assistant explained the difference between repository and environment secrets in detail
Date: Nov 9, 2025
* 🔴 (14:02) User stated their manager Priya wants deploy notes in the wiki by Nov 20
* 🟡 (14:05) Assistant drafted an outline for the wiki page with five sections and a checklist
* 🟡 (14:05) Assistant drafted an outline for the wiki page with five sections and a checklist
* 🟢 (14:06) User said the outline looks fine
* 🟡 (14:10) Agent searched the wiki for existing deploy pages and found three outdated ones
  * -> DevOps/Deploy-2023 last edited by Marco, still describes Jenkins
* 🔴 (14:20) User stated they prefer Markdown tables over bullet lists in documentation
Date: Nov 16, 2025
* 🔴 (10:00) User stated the release 4.2 is planned for Nov 28 and includes the billing rewrite
* 🟡 (10:04) Agent reviewed pull request 311 for the billing rewrite and left 6 comments
* 🟢 (10:05) User thanked the assistant
* 🔴 (10:09) User asked whether the billing rewrite needs a feature flag
* 🟡 (10:15) Assistant recommended a feature flag named billing_v2 with a gradual rollout of 10% per day
* ✅ (10:30) Feature flag billing_v2 created and enabled for the internal tenant
"""


def _reflect(observations: str, *, level: int, target: int | None, include_hints: bool = True) -> str:
    system = build_reflector_system_prompt(
        ReflectorPromptOptions(
            observer_instructions=build_observer_system_prompt(ObserverPromptOptions(thread_title=False))
        )
    )
    user = build_reflector_user_message(
        observations, level=level, target_tokens=target, manual_prompt=None, include_hints=include_hints
    )
    return _text(_complete(system, user))


def _reflected(observations: str, **options: object) -> str:
    parsed = parse_reflector_output(_reflect(observations, **options))  # type: ignore[arg-type]
    assert not parsed.degenerate
    return parsed.observations


@pytest.mark.parametrize("level", [0, 1, 2, 3, 4])
def test_reflection_is_always_smaller_and_never_empty(level: int) -> None:
    reflected = _reflected(LOG, level=level, target=None)
    assert reflected.strip()
    assert count_tokens(reflected) < count_tokens(LOG.strip())


@pytest.mark.parametrize("share", [0.9, 0.7, 0.5, 0.35])
@pytest.mark.parametrize("level", [1, 2, 4])
def test_reflection_gets_under_a_reachable_target(level: int, share: float) -> None:
    target = int(count_tokens(LOG) * share)
    assert count_tokens(_reflected(LOG, level=level, target=target)) < target


def test_an_unreachable_target_still_leaves_one_fact_bearing_line() -> None:
    reflected = _reflected(LOG, level=4, target=5)
    lines = [line for line in reflected.splitlines() if line.startswith("* ")]
    assert len(lines) == 1
    assert lines[0].startswith(("* 🔴 ", "* ✅ "))
    assert has_fact(lines[0].split(") ", 1)[1])


@pytest.mark.parametrize("level", [0, 2, 4])
def test_a_log_of_only_low_priority_lines_is_not_emptied(level: int) -> None:
    log = (
        "Date: Nov 2, 2025\n* 🟢 (09:00) User seemed tired today\n* 🟢 (09:05) User said the weather is grey"
    )
    reflected = _reflected(log, level=level, target=None)
    assert reflected.startswith("Date: Nov 2, 2025\n* 🟢 ")
    assert count_tokens(reflected) < count_tokens(log)


def test_low_priority_lines_go_first_and_facts_with_numbers_and_names_last() -> None:
    reflected = _reflected(LOG, level=1, target=None)
    assert "🟢" not in reflected
    tight = _reflected(LOG, level=2, target=int(count_tokens(LOG) * 0.35))
    for fact in ("Priya", "Nov 20", "billing_v2"):
        assert fact in tight
    assert "Assistant explained the difference between repository and environment secrets" not in tight


def test_identical_lines_are_deduplicated() -> None:
    reflected = _reflected(LOG, level=0, target=None)
    assert reflected.count("Assistant drafted an outline for the wiki page") == 1


def test_near_duplicates_with_different_numbers_are_both_kept() -> None:
    log = (
        "Date: Nov 2, 2025\n"
        "* 🔴 (09:00) User stated their monthly budget for cloud hosting is 2400 euros this year\n"
        "* 🔴 (09:30) User stated their monthly budget for cloud hosting is 3100 euros this year\n"
        "* 🔴 (09:31) User stated their monthly budget for cloud hosting is 3100 euros this year!\n"
        "* 🟢 (09:40) User said thanks"
    )
    reflected = _reflected(log, level=0, target=None)
    assert "2400 euros" in reflected
    assert reflected.count("3100 euros") == 1


def test_date_headers_stay_with_their_kept_lines() -> None:
    reflected = _reflected(LOG, level=4, target=int(count_tokens(LOG) * 0.5))
    headers = [line for line in reflected.splitlines() if line.startswith("Date: ")]
    assert headers
    groups = reflected.split("Date: ")[1:]
    assert all(any(line.startswith("* ") for line in group.splitlines()) for group in groups)
    assert reflected.splitlines()[0].startswith("Date: ")


def test_higher_levels_never_produce_more() -> None:
    sizes = [count_tokens(_reflected(LOG, level=level, target=None)) for level in range(5)]
    assert sizes == sorted(sizes, reverse=True)
    assert sizes[4] < sizes[0]


def test_reflection_is_deterministic() -> None:
    assert _reflect(LOG, level=3, target=300) == _reflect(LOG, level=3, target=300)


def test_hints_are_carried_from_the_input_unless_suppressed() -> None:
    log = LOG + "<current-task>\n- Primary: finish the wiki page\n</current-task>\n"
    log += "<suggested-response>\nAsk whether to add screenshots.\n</suggested-response>"
    parsed = parse_reflector_output(_reflect(log, level=1, target=None))
    assert parsed.current_task == "- Primary: finish the wiki page"
    assert parsed.suggested_response == "Ask whether to add screenshots."
    assert "Primary" not in parsed.observations
    suppressed = _reflect(log, level=1, target=None, include_hints=False)
    assert "<current-task>" not in suppressed and "<suggested-response>" not in suppressed


def test_reflecting_the_observer_output_of_a_conversation() -> None:
    observations = parse_observer_output(_observe(_transcript(_chat()))).observations
    target = int(count_tokens(observations) * 0.6)
    reflected = _reflected(observations, level=2, target=target)
    assert count_tokens(reflected) < target
    assert "Porto" in reflected and "peanuts" in reflected


def test_structure_lines_pass_through() -> None:
    log = '<thread id="t-1">\nDate: Nov 2, 2025\n* 🔴 (09:00) User stated their cat is called Miso\n</thread>'
    reflected = reflect_observations(log, target=None, level=0)
    assert reflected.startswith('<thread id="t-1">') and reflected.endswith("</thread>")


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ("Target size: under 1,200 tokens (compression level 3 of 4).", (1200, 3)),
        ("Target size: under 900 tokens (compression level 0 of 4).", (900, 0)),
        ("no guidance", (None, 0)),
    ],
)
def test_target_and_level_are_read_from_the_prompt(prompt: str, expected: tuple[int | None, int]) -> None:
    assert parse_target(prompt) == expected


# --- helpers and fallbacks ----------------------------------------------------------------------------------


def test_shorten_keeps_the_most_factual_clauses_and_the_resolved_date() -> None:
    text = (
        "User stated they moved to Porto on March 3; the weather was nice; "
        "they're allergic to peanuts (meaning March 3, 2026)"
    )
    short = shorten(text, 17)
    assert (
        short
        == "User stated they moved to Porto on March 3; they're allergic to peanuts (meaning March 3, 2026)"
    )


def test_other_prompts_get_a_short_observation_block() -> None:
    reply = local_reply("", "Remember that I'm allergic to shellfish and my flight is on June 2.")
    assert reply.startswith("<observations>\n* 🔴 User stated")
    assert "shellfish" in reply and "June 2" in reply


# --- what the local model keeps when memory is tight (om_local.salience) -------------------------------

_PEOPLE = ("Aiko", "Bram", "Celia", "Dario", "Elif", "Femi", "Goran", "Hana")
_PLACES = ("Leeds", "Aarhus", "Namur", "Parma", "Oulu", "Zadar", "Trier", "Cadiz")
_THINGS = ("the bike repair", "a pottery class", "the tax form", "a chess book", "the boiler", "a ukulele")
_MONTHS = ("May", "June", "July", "August", "September", "October")


def _anecdote(index: int) -> str:
    """A user statement full of names, numbers and dates that matters only on the day it was said."""
    person, place = _PEOPLE[index % 8], _PLACES[(index * 3) % 8]
    thing, month = _THINGS[index % 6], _MONTHS[(index * 5) % 6]
    if index % 3 == 0:
        return (
            f"On {month} {index % 27 + 1} they drove to {place} and paid {40 + index * 7} euros for {thing}"
        )
    if index % 3 == 1:
        return f"{person} told them that {thing} took {index * 11 % 300 + 5} minutes last Tuesday"
    return f"{person} from {place} lent them {thing}, they owe {person} {index * 13 % 500 + 10} euros"


def _day(day: int, lines: int, first: int, extra: tuple[str, ...] = (), lead: tuple[str, ...] = ()) -> str:
    """One date group of an Observer-style log: `lead` user lines, then anecdotes, assistant filler and
    chatter, then `extra` user lines."""
    out = [f"Date: Jan {day}, 2026"]
    out.extend(f"* 🔴 (09:{n:02d}) User {line}" for n, line in enumerate(lead))
    for n in range(lines):
        minute = n % 60
        index = first + n
        if n % 4 == 3:
            out.append(f"* 🟡 (10:{minute:02d}) Assistant: It may help to break the task into smaller steps")
        elif n % 5 == 4:
            out.append(f"* 🟢 (10:{minute:02d}) User said the weather was grey again")
        else:
            out.append(f"* 🔴 (10:{minute:02d}) User stated {_anecdote(index)}; {_anecdote(index + 1)}")
    out.extend(f"* 🔴 (11:{n:02d}) User {line}" for n, line in enumerate(extra))
    return "\n".join(out)


LASTING_FACTS = (
    "stated their cat is called Pixel",
    "stated they prefer green tea without sugar",
    "stated they live in Ghent with their partner",
    "stated their violin recital is on 9 May at the town hall",
)


@pytest.mark.parametrize(
    ("statement", "tier"),
    [
        ("My cat is called Pixel", Tier.PROFILE),
        ("their cat is called Pixel", Tier.PROFILE),
        ("I prefer green tea without sugar", Tier.PROFILE),
        ("they moved to Ghent in 2019", Tier.PROFILE),
        ("The thesis deadline is 3 June", Tier.PROFILE),
        ("I'm a nurse at the children's hospital", Tier.PROFILE),
        ("I am allergic to shellfish", Tier.CRITICAL),
        ("Correction: the recital is on the ninth of May, not the eighth", Tier.CORRECTION),
        ("our rent went up to 1020 euros", Tier.CORRECTION),
        ("On May 3 we drove to Leeds and paid 40 euros for parking", Tier.SPECIFIC),
        ("Bram told me the boiler took 45 minutes last Tuesday", Tier.SPECIFIC),
        ("My neighbour Bram lent me a ladder", Tier.SPECIFIC),
        ("My partner is coming too", Tier.PLAIN),
        ("I am overthinking it", Tier.PLAIN),
        ("It rained almost every day", Tier.PLAIN),
    ],
)
def test_statements_are_ranked_by_how_long_they_matter(statement: str, tier: Tier) -> None:
    assert salience(statement) == tier


@pytest.mark.parametrize(
    ("new", "old", "replaces"),
    [
        ("their rent went up to 1020 euros a month", "their rent is 950 euros a month", True),
        ("the move to Ghent was on the ninth of May, not the eighth", "they moved to Ghent on May 8", True),
        ("their rent went up to 1020 euros a month", "they paid 400 euros for the rent review", False),
        ("their rent went up to 1020 euros a month", "their cat is called Pixel", False),
        ("their rent went up to 1020 euros a month", "their rent is due on the first Monday", False),
    ],
)
def test_a_correction_replaces_only_the_statement_it_corrects(new: str, old: str, replaces: bool) -> None:
    assert supersedes(new, old) is replaces


@pytest.mark.parametrize(
    ("sentence", "corrects"),
    [
        ("Correction: the recital is on the ninth of May, not the eighth.", True),
        ("Actually, my sister lives in Bruges now.", True),
        ("Our rent went up to 1020 euros after the renovation.", True),
        ("I no longer work at the bakery.", True),
        ("I live in Ghent, not Brussels.", True),
        ("My budget is 900 euros, not a cent more.", False),
        ("Quick update: the boiler works again.", False),
        ("Our rent is 1020 euros a month.", False),
    ],
)
def test_corrections_are_recognised_by_their_cues(sentence: str, corrects: bool) -> None:
    assert is_correction(sentence) is corrects


def test_a_preference_outranks_anecdotes_in_a_long_message() -> None:
    anecdotes = ". ".join(_anecdote(index).replace("they", "we").replace("them", "me") for index in range(12))
    transcript = f"Jan 5 2026:\nUser (9:00 AM): I prefer green tea without sugar. {anecdotes}."
    observations = observe_transcript(transcript)
    assert "they prefer green tea without sugar" in observations
    assert observations.count("; ") < 12  # the message was still condensed


def test_a_correction_in_a_long_message_is_observed_as_an_update() -> None:
    anecdotes = ". ".join(_anecdote(index).replace("they", "we").replace("them", "me") for index in range(12))
    correction = "Correction: the recital is on the ninth of May, not the eighth."
    transcript = f"Jan 5 2026:\nUser (9:00 AM): {correction} {anecdotes}."
    line = next(line for line in observe_transcript(transcript).splitlines() if "recital" in line)
    assert line == "* 🔴 (09:00) User updated: the recital is on the ninth of May"


def test_a_fact_stated_early_survives_many_reflections() -> None:
    log = _day(5, 30, 0, extra=LASTING_FACTS)
    target = 1_500
    for generation in range(10):
        log += "\n" + _day(6 + generation, 30, 40 * (generation + 1))
        log = parse_reflector_output(_reflect(log, level=2, target=target)).observations
        assert count_tokens(log) < target
        for fact in LASTING_FACTS:
            assert fact.split(" ", 1)[1] in log, (generation, fact)


def test_a_correction_replaces_the_old_value_and_keeps_the_rest_of_its_line() -> None:
    log = "\n".join(
        [
            _day(5, 6, 0, extra=("stated their rent is 950 euros a month; they paid 30 euros for a lamp",)),
            _day(9, 6, 10, extra=("updated: their rent went up to 1020 euros a month",)),
        ]
    )
    reflected = _reflected(log, level=0, target=None)
    assert "1020 euros" in reflected
    assert "950 euros" not in reflected
    assert "they paid 30 euros for a lamp" in reflected
    assert "User updated: their rent went up to 1020 euros a month" in reflected


def test_a_corrected_date_replaces_the_old_one_across_generations() -> None:
    log = _day(5, 10, 0, extra=("stated they moved to Ghent on May 8",))
    log += "\n" + _day(8, 10, 20, extra=("updated: the move to Ghent was on the ninth of May",))
    for generation in range(4):
        log = _reflected(log + "\n" + _day(10 + generation, 20, 50 * (generation + 1)), level=2, target=900)
        assert "ninth of May" in log
        assert "May 8" not in log


def test_filler_and_chatter_go_before_anecdotes_and_anecdotes_before_lasting_facts() -> None:
    # The lasting facts are the oldest lines and share them with anecdotes: age alone would drop them first.
    lead = tuple(f"{fact}; {_anecdote(90 + n)}" for n, fact in enumerate(LASTING_FACTS))
    log = _day(5, 24, 0, lead=lead) + "\n" + _day(6, 24, 30)
    size = count_tokens(log)
    gentle = _reflected(log, level=1, target=int(size * 0.8))
    assert "🟢" not in gentle
    assert "drove to" in gentle and "lent them" in gentle  # anecdotes are still there
    tight = _reflected(log, level=4, target=int(size * 0.2))
    assert "🟢" not in tight and "🟡" not in tight
    assert count_tokens(tight) < int(size * 0.2)
    for fact in LASTING_FACTS:
        assert fact.split(" ", 1)[1] in tight


@pytest.mark.parametrize("share", [0.8, 0.5, 0.3, 0.15])
@pytest.mark.parametrize("level", [0, 2, 4])
def test_reflection_of_a_long_log_stays_under_the_budget(level: int, share: float) -> None:
    log = "\n".join(
        _day(5 + day, 30, 40 * day, extra=LASTING_FACTS[day % 4 : day % 4 + 1]) for day in range(6)
    )
    target = int(count_tokens(log) * share)
    reflected = _reflected(log, level=level, target=target)
    assert count_tokens(reflected) < target
    assert "Date: Jan 5, 2026" in reflected or share <= 0.15


def test_a_user_message_given_as_content_parts_gets_the_answer_of_its_text() -> None:
    """The Observer's user message becomes content parts when attachments travel with it; the offline model
    reads its text parts and answers as it would the plain message."""
    chat = [
        *_chat()[:2],
        Message(
            id="img",
            role="user",
            parts=[
                Part(type="text", text="My sister Maya gave me this tent on May 3."),
                Part(type="image", url="https://x.test/tent.png"),
            ],
            created_at=datetime(2025, 12, 4, 15, 0, tzinfo=UTC),
        ),
    ]
    histories = render_histories([chat], "UTC")

    def compose(texts: Sequence[str]) -> str:
        return _observer_prompt(texts[0])[1]

    parts = observer_user_content(histories, compose, True)
    assert isinstance(parts, list) and any(p["type"] == "image_url" for p in parts)
    system = _observer_prompt("")[0]
    register_local_models()
    as_parts = litellm.completion(
        model=MODEL, messages=[{"role": "system", "content": system}, {"role": "user", "content": parts}]
    )
    assert _text(as_parts) == _text(_complete(system, compose([histories[0].text])))
    assert "Maya" in _text(as_parts), "the message the image came with is observed"
