"""`%tf_mem --live`'s ipywidgets view in a real kernel: its comms open and get updates."""

import time

import pytest

from kerasmagic.live.widget import _ViewState, sparkline_svg
from kerasmagic.tables import format_bytes

# The live threads (the sampler): the memory guard's thread runs in every kernel that loaded kerasmagic.
THREADS = ("import threading; "
           "print(sorted(t.name for t in threading.enumerate() if t.name.startswith('kerasmagic-live')))")


@pytest.mark.unit
def test_sparkline_and_values_escape_kernel_strings():
    state = _ViewState(history=3)
    state.take({"method": "sample", "rss_bytes": 2048, "tf": {"status": "unavailable", "reason": "not_imported",
                "detail": "<b>not</b> imported"}, "gpu": {"status": "unavailable", "reason": "no_device",
                "detail": "no driver"}})
    state.take({"method": "facts", "live_models": [{"name": "<script>x</script>"}], "name_counters": {}})
    text = state.values_html()
    assert "<script>" not in text and "&lt;script&gt;" in text and "&lt;b&gt;not" in text
    assert format_bytes(2048) in text  # the same numbers as every other kerasmagic table
    assert format_bytes(None) in text  # no TF allocator number: the table's missing value
    assert sparkline_svg([1, None, 2]).count("<polyline") == 2


@pytest.mark.kernel
def test_live_view_opens_widget_comms_and_updates_from_the_sampler(kernel):
    kernel.execute("%load_ext kerasmagic")
    kernel.execute("from kerasmagic.live import channel; channel.active_channel().sampler.set_interval(0.3)")
    mark = len(kernel.iopub)
    kernel.execute("from kerasmagic.live.widget import show_live\nview = show_live()\ndisplay(view)")
    opened = [m for m in kernel.iopub[mark:] if m["msg_type"] == "comm_open"
              and m["content"]["target_name"] == "jupyter.widget"]
    assert len(opened) >= 4  # VBox, title, values, sparkline, button (+ layouts/styles)
    assert any(m["msg_type"] == "display_data" and "application/vnd.jupyter.widget-view+json" in m["content"]["data"]
               for m in kernel.iopub[mark:])
    mark = len(kernel.iopub)
    kernel.execute("import time; time.sleep(1.5)")
    updates = [m for m in kernel.iopub[mark:] if m["msg_type"] == "comm_msg"
               and m["content"]["data"].get("method") == "update"
               and "<svg" in str(m["content"]["data"].get("state", {}).get("value", ""))]
    # The cell sleeps: these updates came from the sampler thread.
    assert len(updates) >= 3, len(updates)
    assert "kerasmagic-live-sampler" in kernel.execute(THREADS)
    kernel.execute("view.stop()")
    kernel.execute("%unload_ext kerasmagic")
    assert kernel.execute(THREADS).strip() == "[]"


@pytest.mark.kernel
def test_tf_mem_live_magic_shows_the_view(kernel):
    kernel.execute("%load_ext kerasmagic")
    mark = len(kernel.iopub)
    msg_id = kernel.client.execute("%tf_mem --live")
    kernel.wait_for(lambda m: m["msg_type"] == "status" and m["content"]["execution_state"] == "idle"
                    and m["parent_header"].get("msg_id") == msg_id)
    results = [m for m in kernel.iopub[mark:] if m["msg_type"] in ("execute_result", "display_data")]
    assert len(results) == 1, [m["msg_type"] for m in results]  # shown once, not twice
    assert "application/vnd.jupyter.widget-view+json" in results[0]["content"]["data"]
    kernel.execute("%unload_ext kerasmagic")
    assert kernel.execute(THREADS).strip() == "[]"


LISTENERS = ("from kerasmagic.live import channel as _c; _ch = _c.active_channel(); "
             "print(_ch.view_count, _ch.looking)")


def _run_magic(kernel, code):
    msg_id = kernel.client.execute(code)
    kernel.wait_for(lambda m: m["msg_type"] == "status" and m["content"]["execution_state"] == "idle"
                    and m["parent_header"].get("msg_id") == msg_id)
    errors = [m for m in kernel.iopub if m["msg_type"] == "error" and m["parent_header"].get("msg_id") == msg_id]
    assert not errors, errors[0]["content"]["traceback"]


@pytest.mark.kernel
def test_rerunning_live_keeps_one_view_and_closing_it_stops_following(kernel):
    kernel.execute("%load_ext kerasmagic")
    _run_magic(kernel, "first = %tf_mem --live")
    assert kernel.execute(LISTENERS).split() == ["1", "True"]
    _run_magic(kernel, "second = %tf_mem --live")
    # The re-run replaced the first view: one listener, and the first says it stopped.
    assert kernel.execute(LISTENERS).split() == ["1", "True"]
    assert kernel.execute("print(first.running, second.running, first.stop_button.description)").split() == [
        "False", "True", "Stopped"]
    # Closing the widget from Python stops the view: nothing looks (the kernel still records).
    kernel.execute("second.widget.close()")
    assert kernel.execute(LISTENERS).split() == ["0", "False"]
    assert kernel.execute("print(second.running)").strip() == "False"


@pytest.mark.kernel
def test_frontend_closing_the_live_widget_stops_the_view(kernel):
    kernel.execute("%load_ext kerasmagic")
    _run_magic(kernel, "view = %tf_mem --live")
    assert kernel.execute(LISTENERS).split() == ["1", "True"]
    box_id = kernel.execute("print(view.widget.model_id)").strip()
    kernel.close_comm(box_id)  # what a frontend sends when it closes the widget's model
    assert kernel.execute(LISTENERS).split() == ["0", "False"]
    assert kernel.execute("print(view.running)").strip() == "False"


@pytest.mark.kernel
def test_unload_stops_the_live_view(kernel):
    kernel.execute("%load_ext kerasmagic")
    _run_magic(kernel, "view = %tf_mem --live")
    kernel.execute("%unload_ext kerasmagic")
    assert kernel.execute("print(view.running)").strip() == "False"
    assert kernel.execute(THREADS).strip() == "[]"


@pytest.mark.unit
def test_the_chart_marks_each_cell_run_and_a_failed_one_differently():
    state = _ViewState(history=10)
    state.take({"method": "history", "samples": [
        {"method": "sample", "ts": 100.0 + i, "rss_bytes": (100 + i) * 2**20} for i in range(6)],
        "cell_runs": [{"execution_count": 3, "cell_id": None, "started_ts": 101.0, "ended_ts": 102.0, "status": "ok"}],
        "marks": []})
    state.take({"method": "cell_run", "ts": 103.0, "run": {
        "execution_count": 4, "cell_id": None, "started_ts": 103.0, "ended_ts": None, "status": "running"}})
    state.take({"method": "cell_run", "ts": 104.0, "run": {
        "execution_count": 4, "cell_id": None, "started_ts": 103.0, "ended_ts": 104.0, "status": "error"}})
    svg = state.chart_svg()
    assert ">[3]</text>" in svg and ">[4]</text>" in svg
    assert svg.count("<rect") == 2  # the ended run replaced its running state: one span per run
    assert 'data-status="ok"' in svg and 'data-status="error"' in svg
    # The spans sit where their times are: [3] starts a fifth of the way along 100..105 s.
    assert '<rect x="72.0"' in svg


@pytest.mark.unit
def test_auto_picks_the_in_place_output_where_colab_cannot_render_the_widgets(monkeypatch):
    import sys
    import types

    from kerasmagic.compat import widgets_render_here
    from kerasmagic.live.widget import choose_mode

    assert widgets_render_here("8.1.5") == (True, "ipywidgets 8.1.5")
    # Colab cannot be had here; its frontend is recognised by the module it loads in the kernel.
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    renders, why = widgets_render_here("8.1.5")
    assert not renders and "enable_custom_widget_manager()" in why
    assert widgets_render_here("7.7.1")[0]
    manager = types.ModuleType("google.colab.output._widgets")
    manager._installed_url = "https://ssl.gstatic.com/colaboratory-static/widgets/colab-cdn-widget-manager/x.js"
    monkeypatch.setitem(sys.modules, "google.colab.output._widgets", manager)
    assert widgets_render_here("8.1.5")[0]
    assert choose_mode("display") == ("display", "asked for with --live display")
    with pytest.raises(ValueError, match="auto, widgets, display"):
        choose_mode("sidebar")


@pytest.mark.kernel
def test_live_display_mode_updates_one_output_in_place_during_and_after_the_cell(kernel):
    kernel.execute("%load_ext kerasmagic")
    kernel.execute("from kerasmagic.live import channel; channel.active_channel().sampler.set_interval(0.3)")
    mark = len(kernel.iopub)
    _run_magic(kernel, "%tf_mem --live display")
    shown = [m for m in kernel.iopub[mark:] if m["msg_type"] == "display_data"]
    assert len(shown) == 1, [m["msg_type"] for m in kernel.iopub[mark:]]
    display_id = shown[0]["content"]["transient"]["display_id"]
    page = shown[0]["content"]["data"]["text/html"]
    assert "kerasmagic live" in page and "display: asked for with --live display" in page
    assert not any(m["msg_type"] == "comm_open" for m in kernel.iopub[mark:]), "no widget in this mode"
    mark = len(kernel.iopub)
    kernel.execute("x = bytearray(64 * 2**20); import time; time.sleep(1.5)")
    time.sleep(1.0)  # the kernel idles: the sampler still publishes updates for that output
    kernel.execute("pass")
    updates = [m for m in kernel.iopub[mark:] if m["msg_type"] == "update_display_data"]
    assert len(updates) >= 4, len(updates)
    assert {m["content"]["transient"]["display_id"] for m in updates} == {display_id}
    assert any(">[" in m["content"]["data"]["text/html"] for m in updates), "the cell runs are marked"
    assert "Kernel memory (RSS)" in updates[-1]["content"]["data"]["text/html"]
    _run_magic(kernel, "%tf_mem --live off")
    assert kernel.execute(LISTENERS).split() == ["0", "False"]
    mark = len(kernel.iopub)
    kernel.execute("import time; time.sleep(1.0)")
    assert not [m for m in kernel.iopub[mark:] if m["msg_type"] == "update_display_data"]
    kernel.execute("%unload_ext kerasmagic")
    assert kernel.execute(THREADS).strip() == "[]"


@pytest.mark.kernel
def test_live_widget_view_says_which_it_is_and_a_bad_mode_is_one_line(kernel):
    kernel.execute("%load_ext kerasmagic")
    _run_magic(kernel, "view = %tf_mem --live")
    title = kernel.execute("print(view.title.value)")
    version = kernel.execute("import ipywidgets; print(ipywidgets.__version__)").strip()
    assert "kerasmagic live" in title and f"widgets: ipywidgets {version}" in title, title
    msg_id = kernel.client.execute("%tf_mem --live sidebar")
    reply = kernel.wait_for(lambda m: m["msg_type"] in ("error", "stream")
                            and m["parent_header"].get("msg_id") == msg_id)
    text = reply["content"].get("text") or "\n".join(reply["content"].get("traceback", []))
    assert "--live takes auto, widgets, display or off, not 'sidebar'" in text
    assert "Traceback" not in text
    kernel.execute("%unload_ext kerasmagic")
