"""The all-reduce animation is drawn from the traced values."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from ddp_lab.collectives.traced import run_traced_all_reduce  # noqa: E402
from ddp_lab.draw import allreduce as draw  # noqa: E402


@pytest.fixture(scope="module")
def ring_run():
    return run_traced_all_reduce("ring", world_size=3, length=6)


def frame_texts(run, frame):
    fig, ax = draw.new_axes()
    draw.draw_frame(run, frame, ax)
    texts = [t.get_text() for t in ax.texts] + [ax.get_title(loc="left")]
    plt.close(fig)
    return texts


def test_every_cell_shows_the_values_the_rank_held(ring_run):
    for frame in range(len(ring_run.traces[0].steps) + 1):
        texts = frame_texts(ring_run, frame)
        for trace in ring_run.traces:
            chunks = trace.initial if frame == 0 else trace.steps[frame - 1].chunks
            for chunk in chunks:
                assert "\n".join(f"{v:g}" for v in chunk.tolist()) in texts


def test_frames_name_the_phase_and_the_last_one_checks_against_torch(ring_run):
    assert "the inputs" in frame_texts(ring_run, 0)[-1]
    assert "step 1 of 4 (reduce-scatter)" in frame_texts(ring_run, 1)[-1]
    last = frame_texts(ring_run, 4)
    assert "step 4 of 4 (all-gather)" in last[-1]
    assert any("equal to torch's dist.all_reduce" in t for t in last)
    assert any("rank 0: 32" in t for t in last)  # 2(W-1) = 4 chunks of 2 float32


def test_arrows_carry_the_chunk_labels_of_the_step(ring_run):
    texts = frame_texts(ring_run, 1)
    sent = {f"c{chunk}" for trace in ring_run.traces for _, chunk in trace.steps[0].sends}
    assert sent == {"c0", "c1", "c2"} and sent <= set(texts)


def test_the_animation_has_one_frame_per_step_plus_the_inputs(ring_run):
    html = draw.animate(ring_run).to_jshtml()
    assert html.count("data:image/png;base64") == 5


def test_every_number_is_legible_on_a_phone(ring_run):
    """Shown in a 390 px phone's 358 px column, no text of any frame is under 10 px."""
    from ddp_lab.draw import MIN_TEXT_PX, PHONE_COLUMN_PX, smallest_shown_px

    for frame in range(len(ring_run.traces[0].steps) + 1):
        fig, ax = draw.new_axes()
        draw.draw_frame(ring_run, frame, ax)
        assert smallest_shown_px(fig, column_px=PHONE_COLUMN_PX) >= MIN_TEXT_PX, frame
        plt.close(fig)


def test_the_html_prints_a_strip_of_every_step_and_hides_the_player(ring_run):
    import re

    page = draw.to_html(ring_run).data
    steps = len(ring_run.traces[0].steps)
    strip = page[page.index('class="ddp-print-strip"'):]
    captions = re.findall(r"<figcaption>(.*?)</figcaption>", strip)
    assert captions == ["the inputs"] + [f"step {s} of {steps} ({ring_run.traces[0].steps[s - 1].phase})"
                                         for s in range(1, steps + 1)]
    assert strip.count("data:image/png;base64") == steps + 1
    style = page[page.index("<style>"):page.index("</style>")]
    screen, printed = style.split("@media print")
    assert re.search(r"\.ddp-print-strip \{ display: none; \}", screen)  # hidden on screen
    assert re.search(r"\.ddp-player \{ display: none", printed)         # the dead buttons are not printed
    assert re.search(r"\.ddp-print-strip \{ display: flex", printed)


def test_the_players_frame_has_an_alt_text(ring_run):
    """matplotlib's player writes its <img> without alt; ours says what the frame shows."""
    import re

    player = draw.to_html(ring_run).data.split('class="ddp-print-strip"')[0]
    frames = re.findall(r'<img\b[^>]*id="_anim_img[^"]*"[^>]*>', player)
    assert len(frames) == 1, frames
    alt = re.search(r'alt="([^"]*)"', frames[0])
    assert alt and f"on {ring_run.world_size} ranks" in alt.group(1), frames[0]


def test_an_all_to_all_is_drawn_with_its_own_words():
    from ddp_lab.collectives.traced import run_traced_collective

    run = run_traced_collective("pairwise", world_size=3, length=6)
    assert "tens digit" in "".join(frame_texts(run, 0))
    last = frame_texts(run, 2)
    assert "step 2 of 2 (exchange)" in last[-1]
    assert any("equal to dist.all_to_all_single" in t for t in last)
    assert any("rank 0: 16" in t for t in last)  # W-1 = 2 chunks of 2 float32
    for trace in run.traces:  # the cells show what the rank held: rank j's chunk for it
        for chunk in trace.steps[-1].chunks:
            assert "\n".join(f"{v:g}" for v in chunk.tolist()) in last
