"""Message segments cut from the model's chat template concatenate to the template's own rendering, so a
branch's prompt is the exact prefix of the next turn's."""

import copy

import pytest

from localchat.app.server.chat_template import ChatTemplate


@pytest.fixture(scope="module")
def tokenizer():
    from localchat.engine.loading.loader import resolve_model

    return resolve_model(None).tokenizer  # the embedded SmolLM2's


def branch_ids(template, chat, eos_id):
    """The prompt as the server builds it: system segment + message segments + generation prompt."""
    system = chat[:1] if chat[0]["role"] == "system" else []
    ids = template.segment([], system[0]) if system else []
    for i in range(len(system), len(chat)):
        message = chat[i]
        if message["role"] == "user":
            ids += template.segment(chat[:i], message)
        else:
            generated = template.encode(message["content"]) + [eos_id]
            ids += template.assistant_segment(chat[:i], message["content"], generated)
    return ids + template.generation_prompt(chat)


CHATS = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Tell me a joke."}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hey."}, {"role": "user", "content": "Bye"},
     {"role": "assistant", "content": "Bye!\n\nSee you."}, {"role": "user", "content": "ok"}],
]


@pytest.mark.parametrize("chat", CHATS)
def test_segments_concatenate_to_the_templates_rendering(tokenizer, chat):
    template = ChatTemplate(tokenizer)
    expected = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    ids = branch_ids(template, chat, tokenizer.eos_token_id)
    assert tokenizer.decode(ids) == expected
    assert ids == tokenizer.encode(expected, add_special_tokens=False)  # token for token, for ChatML


def test_each_turn_is_a_prefix_of_the_next(tokenizer):
    template = ChatTemplate(tokenizer)
    chat = CHATS[2]
    previous = []
    for end in (2, 4, 6):
        ids = branch_ids(template, chat[:end], tokenizer.eos_token_id)
        generation_prompt = template.generation_prompt(chat[:end])
        assert ids[: len(previous)] == previous
        previous = ids[: len(ids) - len(generation_prompt)] + generation_prompt


def test_a_reply_cut_by_max_tokens_gets_the_templates_closing(tokenizer):
    template = ChatTemplate(tokenizer)
    chat = [{"role": "user", "content": "Hi"}]
    generated = template.encode("Hello there")  # no end-of-turn token: cut by max_tokens or stopped
    ids = template.assistant_segment(chat, "Hello there", generated)
    assert tokenizer.decode(ids) == "<|im_start|>assistant\nHello there<|im_end|>\n"
    with_eos = template.assistant_segment(chat, "Hello there", generated + [tokenizer.eos_token_id])
    assert with_eos == ids  # the same tokens, whoever wrote the <|im_end|>
    empty = template.assistant_segment(chat, "", [])
    assert tokenizer.decode(empty) == "<|im_start|>assistant\n<|im_end|>\n"


def test_another_template_shape(tokenizer):
    """A template with a BOS string, other role markers and a closing that is not a special token."""
    other = copy.deepcopy(tokenizer)
    other.chat_template = ("{{ '<|endoftext|>' }}{% for m in messages %}### {{ m['role'] }}:\n{{ m['content'] }}"
                           "\n\n{% endfor %}{% if add_generation_prompt %}### assistant:\n{% endif %}")
    template = ChatTemplate(other)
    chat = CHATS[1]
    expected = other.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    assert other.decode(branch_ids(template, chat, other.eos_token_id)) == expected.replace(
        "How can I help?\n\n", "How can I help?<|im_end|>\n\n")  # the model's own end-of-turn token stays
