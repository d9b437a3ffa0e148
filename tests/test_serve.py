"""`python -m lc_cfr.serve`: whole games through the JSON API, every bad input refused with
the game unchanged, independent games, the page's files, and a real headless browser
playing a game by clicking."""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

import jax
import pytest
from config_helpers import default_config

from lc_cfr import search
from lc_cfr.game import engine
from lc_cfr.train import Trainer
from lc_cfr.train.saved_networks import load_saved_networks
from lc_cfr.web import games, server

ROOT = pathlib.Path(__file__).resolve().parent.parent
ENV = dict(os.environ, LC_CFR_JAX_CACHE=str(ROOT / ".cache" / "jax"))
INSTALL_BROWSER = "apt-get install chromium chromium-driver (CI=true scripts/setup_env.sh does)"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """One iteration of the smoke preset, trained in-process."""
    config = default_config.get_config("smoke")
    config.logging.tensorboard = False
    config.run.max_iterations = 1
    workdir = tmp_path_factory.mktemp("run")
    Trainer(config, workdir).run()
    return workdir


@pytest.fixture(scope="module")
def url(run_dir):
    """A server on a free port of this machine, with small search options."""
    options = search.SearchOptions(determinizations=2, candidates=2)
    store = games.GameStore(run_dir, search_options=options)
    httpd = server.make_server(store, "127.0.0.1", 0)
    server.serve_in_background(httpd)
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def call(url, method, path, body=None, raw=None):
    """(status, JSON document) of one request."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(url + path, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def play_out(url, game):
    """Plays the human's first legal move until the game ends; the final document."""
    while not game["over"]:
        assert game["to_move"] == "you" and game["legal"]
        move = {"action": game["legal"][0]["action"], "decision": game["decision"]}
        status, game = call(url, "POST", f"/api/games/{game['game_id']}/move", move)
        assert status == 200, game
    return game


def replay(run_dir, game):
    """The engine's final state after the logged actions from the game's deal."""
    rules = load_saved_networks(run_dir).rules
    state = engine.init(rules, game["seed"], game["deal"])
    for entry in game["log"]:
        state = engine.step(rules, state, entry["action"])
    return jax.device_get(state)


@pytest.mark.parametrize("view", ["average_strategy", "current", "search"])
def test_a_whole_game_through_the_api_ends_with_the_engines_scores(run_dir, url, view):
    seat = 1 if view == "current" else 0  # the agent starts one of them
    status, game = call(url, "POST", "/api/games", {"view": view, "seat": seat, "deal": 3})
    assert status == 201, game
    assert game["view"] == view and game["seat"] == seat and game["to_move"] == "you"
    assert len(game["hand"]) == 3 and game["opponent"]["count"] == 3
    final = play_out(url, game)
    assert (
        final["over"]
        and final["legal"] == []
        and final["result"]["winner"]
        in (
            "you",
            "agent",
            "draw",
        )
    )
    x = replay(run_dir, final)
    assert bool(x.terminal)
    assert final["result"]["you"] == int(x.scores[seat])
    assert final["result"]["agent"] == int(x.scores[1 - seat])
    assert sum(final["expedition_scores"]["you"]) == final["scores"]["you"]
    agent_moves = [e for e in final["log"] if e["who"] == "agent"]
    assert agent_moves and all(0 <= e["prob"] <= 1 for e in agent_moves)
    if seat == 1:
        assert final["log"][0]["who"] == "agent"
    if view == "average_strategy":  # this deal has a deck-only draw, made for you
        assert any(e.get("forced") and e["who"] == "you" for e in final["log"])


def test_bad_input_is_refused_and_the_game_is_unchanged(url):
    status, game = call(url, "POST", "/api/games", {"deal": 5})
    assert status == 201
    gid, decision = game["game_id"], game["decision"]
    legal = {m["action"] for m in game["legal"]}
    illegal = next(a for a in range(9) if a not in legal)
    move = f"/api/games/{gid}/move"
    refused = [
        (call(url, "POST", move, {"action": illegal, "decision": decision}), 422, "illegal move"),
        (call(url, "POST", move, {"action": 0, "decision": decision + 3}), 409, "stale move"),
        (call(url, "POST", move, {"action": 0}), 400, "missing field 'decision'"),
        (call(url, "POST", move, {"action": "0", "decision": decision}), 400, "integer"),
        (call(url, "POST", move, {"action": 99, "decision": decision}), 400, "action must be"),
        (call(url, "POST", move, {"action": 0, "decision": decision, "x": 1}), 400, "unknown"),
        (call(url, "POST", move, raw=b"{not json"), 400, "not JSON"),
        (call(url, "POST", move, [1, 2]), 400, "JSON object"),
        (
            call(url, "POST", "/api/games/0123abcd/move", {"action": 0, "decision": 0}),
            404,
            "no game",
        ),
        (call(url, "GET", "/api/games/nothex!"), 404, "no such page"),
        (call(url, "POST", "/api/games", {"view": "best"}), 400, "view must be one of"),
        (call(url, "POST", "/api/games", {"seat": 2}), 400, "seat must be in"),
        (call(url, "POST", "/api/games", {"checkpoint": 999}), 404, "no checkpoint 999"),
        (call(url, "POST", "/api/games", {"view": "sd_cfr"}), 400, "no SD-CFR snapshots"),
    ]
    for (status, document), expected, reason in refused:
        assert status == expected and reason in document["error"], (status, document)
        assert "\n" not in document["error"]
    status, again = call(url, "GET", f"/api/games/{gid}")
    assert status == 200 and again == game  # nothing was applied
    final = play_out(url, again)
    status, late = call(url, "POST", move, {"action": 0, "decision": final["decision"]})
    assert status == 409 and "over" in late["error"]
    status, hint = call(url, "GET", f"/api/games/{gid}/hint")
    assert status == 409


def test_a_move_out_of_turn_is_refused(run_dir):
    """The server answers after the agent's moves, so the human never sees the agent to
    move: the refusal is checked on the store, with the game's seat turned round."""
    store = games.GameStore(run_dir)
    game = store.new_game({"deal": 2})
    session = store._games[game["game_id"]]
    session.human = 1 - session.human  # now the player to move is the agent
    with pytest.raises(games.RequestError, match="not your turn") as refused:
        store.move(game["game_id"], {"action": 0, "decision": game["decision"]})
    assert refused.value.status == 409 and session.decision == game["decision"]


def test_search_cut_at_a_value_network_the_run_lacks_fails_at_start(run_dir):
    """--search_leaf_decisions over a run without a value network: the store refuses at
    start, naming the flag (lc_cfr.serve prints it as its one line)."""
    options = search.SearchOptions(leaf_decisions=4)
    with pytest.raises(ValueError, match="--search_leaf_decisions"):
        games.GameStore(run_dir, search_options=options)


def test_two_games_do_not_interfere_and_hints_cover_the_legal_moves(url):
    _, first = call(url, "POST", "/api/games", {"deal": 7, "seed": 1})
    _, second = call(url, "POST", "/api/games", {"deal": 7, "seed": 1})
    assert first["game_id"] != second["game_id"]
    status, hint = call(url, "GET", f"/api/games/{first['game_id']}/hint")
    assert status == 200
    assert {m["action"] for m in hint["moves"]} == {m["action"] for m in first["legal"]}
    assert abs(sum(m["prob"] for m in hint["moves"]) - 1) < 1e-5
    move = {"action": first["legal"][-1]["action"], "decision": first["decision"]}
    _, moved = call(url, "POST", f"/api/games/{first['game_id']}/move", move)
    _, untouched = call(url, "GET", f"/api/games/{second['game_id']}")
    assert untouched == second and moved["decision"] > first["decision"]
    _, same = call(url, "POST", f"/api/games/{second['game_id']}/move", move)
    assert {k: v for k, v in same.items() if k != "game_id"} == {
        k: v for k, v in moved.items() if k != "game_id"
    }


def test_the_page_and_its_files(url):
    for path, kind, text in (
        ("/", "text/html", "Lost Cities"),
        ("/static/app.js", "javascript", "/api/games"),
        ("/static/style.css", "text/css", ".card"),
    ):
        with urllib.request.urlopen(url + path, timeout=30) as response:
            assert kind in response.headers["Content-Type"]
            assert text in response.read().decode()
    page = (pathlib.Path(games.__file__).parent / "static" / "index.html").read_text()
    assert "http://" not in page and "https://" not in page  # offline: nothing fetched elsewhere
    assert call(url, "GET", "/static/../games.py")[0] == 404
    status, info = call(url, "GET", "/api/info")
    assert status == 200 and info["checkpoints"] == [1] and "search" in info["views"]
    assert "sd_cfr" not in info["views"] and len(info["cards"]) == info["rules"]["n_cards"]


@pytest.mark.parametrize("damage", ["missing", "no config"])
def test_cli_fails_with_one_line_on_a_missing_or_damaged_run(tmp_path, damage):
    run = tmp_path / "run"
    if damage == "no config":
        run.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "lc_cfr.serve", f"--workdir={run}"],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lc_cfr.serve: "), result.stderr
    assert ("does not exist" if damage == "missing" else "config.json is missing") in lines[0]


def _browser():
    """A headless Chromium through Debian's chromedriver, or a skip naming the install."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="pip install selenium")
    driver_path = shutil.which("chromedriver")
    browser_path = shutil.which("chromium") or shutil.which("chromium-browser")
    if not driver_path or not browser_path:
        pytest.skip(f"no chromium/chromedriver on this machine: {INSTALL_BROWSER}")
    options = webdriver.ChromeOptions()
    options.binary_location = browser_path
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument("--window-size=1280,1000")
    service = webdriver.ChromeService(executable_path=driver_path)
    return webdriver.Chrome(options=options, service=service)


@pytest.mark.slow
def test_a_browser_plays_a_whole_game_by_clicking(url, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    driver = _browser()
    try:
        wait = WebDriverWait(driver, 60)
        driver.get(url + "/")
        start = wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "[data-testid=start]")))
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#view option"))
        driver.find_element(By.CSS_SELECTOR, "[data-testid=deal]").send_keys("11")
        start.click()
        body = driver.find_element(By.TAG_NAME, "body")
        for _ in range(200):
            wait.until(lambda d: body.get_attribute("data-screen") in ("game", "final"))
            if body.get_attribute("data-screen") == "final":
                break
            phase = body.get_attribute("data-phase")
            decisions = len(driver.find_elements(By.CSS_SELECTOR, "#log li"))
            if phase == "card":
                driver.find_element(By.CSS_SELECTOR, "[data-testid=card-0]").click()
                discard = driver.find_element(By.CSS_SELECTOR, "[data-testid=discard]")
                wait.until(lambda d, b=discard: b.is_enabled())
                discard.click()
            else:
                deck = driver.find_element(By.CSS_SELECTOR, "[data-testid=deck]")
                wait.until(lambda d, b=deck: b.is_enabled())
                deck.click()
            wait.until(
                lambda d, n=decisions: (
                    len(d.find_elements(By.CSS_SELECTOR, "#log li")) > n
                    or body.get_attribute("data-screen") == "final"
                )
            )
        final = driver.find_element(By.CSS_SELECTOR, "[data-testid=final]")
        assert final.is_displayed()
        assert driver.find_elements(By.CSS_SELECTOR, "#final-scores tr.total")
        title = driver.find_element(By.ID, "final-title").text
        assert "win" in title or "draw" in title
        driver.save_screenshot(str(tmp_path / "final.png"))
        assert (tmp_path / "final.png").stat().st_size > 1000
    finally:
        driver.quit()
