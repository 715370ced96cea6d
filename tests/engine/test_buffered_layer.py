"""``BufferedLayer`` writes decoded tokens into room it already has (no copy per token), and notices states that
something else replaced (compression, a fork's shared prefix) before writing next to them."""

from __future__ import annotations

import torch

from snapkv_cli.engine.layers import BufferedLayer


def states(tokens: int, start: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    keys = torch.arange(tokens, dtype=torch.float32).add(start).reshape(1, 1, tokens, 1).expand(1, 2, tokens, 3)
    return keys.contiguous(), (-keys).contiguous()


def storage(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


def test_updates_within_the_room_write_in_place_and_a_full_buffer_grows():
    layer = BufferedLayer()
    keys, values = layer.update(*states(10))
    first = storage(keys)
    room = 10 + BufferedLayer.headroom
    keys, values = layer.update(*states(room - 10, start=10))  # exactly fills the room: still no copy
    assert storage(keys) == first and keys.shape[2] == room
    assert torch.equal(keys[0, 0, :, 0], torch.arange(room, dtype=torch.float32))
    assert torch.equal(values, -keys)
    keys, _ = layer.update(*states(1, start=room))  # one more: a new, larger buffer
    assert storage(keys) != first and torch.equal(keys[0, 0, :, 0], torch.arange(room + 1, dtype=torch.float32))


def test_replaced_states_are_moved_before_the_next_write():
    layer = BufferedLayer()
    layer.update(*states(6))
    kept_keys, kept_values = states(3, start=100)  # what a compression kept, in tensors of its own
    layer.keys, layer.values = kept_keys, kept_values
    new_keys, new_values = states(2, start=200)
    keys, values = layer.update(new_keys, new_values)
    assert torch.equal(keys, torch.cat([kept_keys, new_keys], dim=2))
    assert torch.equal(values, torch.cat([kept_values, new_values], dim=2))
    assert storage(keys) != storage(kept_keys)  # the compressed tensors are not written into


def test_a_replaced_value_tensor_alone_is_noticed():
    layer = BufferedLayer()
    layer.update(*states(4))
    layer.values = states(4, start=50)[1]  # the keys still live in the buffer, the values do not
    keys, values = layer.update(*states(1, start=4))
    assert torch.equal(values[0, 0, :, 0], torch.tensor([-50.0, -51.0, -52.0, -53.0, -4.0]))
    assert torch.equal(keys[0, 0, :, 0], torch.arange(5, dtype=torch.float32))


def test_replace_states_then_update_continues_from_them():
    layer = BufferedLayer()
    layer.update(*states(8))
    layer.replace_states(*states(3, start=10))
    keys, values = layer.update(*states(1, start=13))
    assert torch.equal(keys[0, 1, :, 2], torch.tensor([10.0, 11.0, 12.0, 13.0])) and torch.equal(values, -keys)


def test_a_reset_layer_starts_again():
    layer = BufferedLayer()
    layer.update(*states(5))
    layer.reset()
    keys, values = layer.update(*states(2, start=7))
    assert torch.equal(keys[0, 0, :, 0], torch.tensor([7.0, 8.0])) and torch.equal(values, -keys)


def test_a_shared_copy_shares_the_states_and_neither_layer_sees_the_others_new_tokens():
    layer = BufferedLayer()
    layer.update(*states(5))
    copy = layer.shared_copy()
    assert storage(copy.keys) == storage(layer.keys) and storage(copy.values) == storage(layer.values)
    own_keys, _ = layer.update(*states(2, start=100))  # the original still has room: it writes in place
    copy_keys, copy_values = copy.update(*states(1, start=200))
    assert torch.equal(own_keys[0, 0, :, 0], torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 100.0, 101.0]))
    assert torch.equal(copy_keys[0, 0, :, 0], torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 200.0]))
    assert torch.equal(copy_values, -copy_keys) and storage(copy_keys) != storage(own_keys)
    assert torch.equal(layer.keys[0, 0, :, 0], own_keys[0, 0, :, 0])  # the copy's token did not land in it


def test_two_forks_of_a_prefix_decoding_in_turn_each_see_only_their_own_question():
    """Two questions forked from one stored prefix (the full cache, so nothing is compressed away) take turns: each
    one's next-token logits are those of the same question asked alone."""
    from snapkv_cli.engine import CompressionSettings, attached
    from snapkv_cli.generation import build_prefix
    from tests.tiny_models import prompt_ids, tiny_model

    model = tiny_model("llama")
    settings = CompressionSettings(method="full", window_size=4, max_capacity_prompt=8)

    def step(cache, ids: list[int], start: int) -> torch.Tensor:
        positions = torch.arange(start, start + len(ids))
        return model(torch.tensor([ids]), past_key_values=cache, position_ids=positions[None],
                     cache_position=positions, use_cache=True).logits[0, -1]

    first, second = prompt_ids(6, seed=31)[0].tolist(), prompt_ids(6, seed=32)[0].tolist()
    with attached(model), torch.no_grad():
        shared = build_prefix(model, prompt_ids(40, seed=30)[0].tolist(), window_size=4)
        alone = shared.fork(settings)
        step(alone, first, 40)
        expected = step(alone, [7], 46)
        one, other = shared.fork(settings), shared.fork(settings)
        step(one, first, 40)
        step(other, second, 40)
        assert torch.equal(step(one, [7], 46), expected)
