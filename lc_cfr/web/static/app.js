// The page of lc_cfr.serve: renders what the server sends and posts the human's moves.
// No rules live here: the server says which moves are legal and applies them.
"use strict";

let info = null;   // GET /api/info
let game = null;   // the current game, as the server last sent it
let selected = null;  // the hand slot picked for play / discard

const $ = (id) => document.getElementById(id);

async function api(method, path, body) {
  const options = {method, headers: {"Content-Type": "application/json"}};
  if (body !== undefined) options.body = JSON.stringify(body);
  const response = await fetch(path, options);
  const document_ = await response.json();
  if (!response.ok) throw new Error(document_.error || response.statusText);
  return document_;
}

function showError(error) {
  const box = $("error");
  box.textContent = error ? String(error.message || error) : "";
  box.classList.toggle("hidden", !error);
}

function screen(name) {
  document.body.dataset.screen = name;
  $("start").classList.toggle("hidden", name !== "start");
  $("game").classList.toggle("hidden", name === "start");
  $("final").classList.toggle("hidden", name !== "final");
}

// ----- cards ------------------------------------------------------------------------

function cardElement(id, extra) {
  const card = info.cards[id];
  const el = document.createElement("span");
  el.className = `card c${card.color}` + (extra ? " " + extra : "");
  el.textContent = card.face;
  el.title = card.name;
  return el;
}

function backElement() {
  const el = document.createElement("span");
  el.className = "card back";
  el.textContent = "?";
  return el;
}

// ----- the start screen --------------------------------------------------------------

async function loadInfo() {
  info = await api("GET", "/api/info");
  const checkpoints = $("checkpoint");
  checkpoints.innerHTML = "";
  for (const step of info.checkpoints.slice().reverse()) {
    const option = new Option(step === info.latest ? `${step} (latest)` : String(step), step);
    checkpoints.add(option);
  }
  const views = $("view");
  views.innerHTML = "";
  const names = {
    average_strategy: "the average strategy",
    current: "the current policy",
    sd_cfr: "SD-CFR",
    search: `search (${info.search.determinizations} worlds, ` +
      `${info.search.candidates || "all"} candidates)`,
  };
  for (const view of info.views) views.add(new Option(names[view] || view, view));
  $("run").textContent = `Run ${info.workdir}: ${info.rules.n_colors} colours, hands of ` +
    `${info.rules.hand_size}, at most ${info.rules.max_turns} turns.`;
}

async function startGame(event) {
  if (event) event.preventDefault();
  showError(null);
  const request = {
    checkpoint: Number($("checkpoint").value),
    view: $("view").value,
    seat: Number($("seat").value),
    seed: Number($("seed").value || 0),
  };
  if ($("deal").value !== "") request.deal = Number($("deal").value);
  try {
    game = await api("POST", "/api/games", request);
    selected = null;
    render();
  } catch (error) {
    showError(error);
  }
}

// ----- the game ----------------------------------------------------------------------

function legalAction(action) {
  return game.legal.some((move) => move.action === action);
}

function render() {
  screen(game.over ? "final" : "game");
  const rules = info.rules;
  const h = rules.hand_size;
  document.body.dataset.phase = game.phase || "over";
  document.body.dataset.toMove = game.to_move || "nobody";
  $("status").textContent = game.over ? "Game over" :
    `Turn ${game.turn} of at most ${game.max_turns} · ${game.deck} cards in the deck · ` +
    (game.to_move === "you" ? (game.phase === "card" ? "play or discard a card" : "draw a card")
      : "the agent is thinking");
  $("info").textContent = `Checkpoint ${game.checkpoint}, agent: ${game.view}, deal ` +
    `${game.deal}, seed ${game.seed}; scores: you ${game.scores.you}, agent ${game.scores.agent}`;

  // the opponent's hand: backs, and the cards it took from a pile face up
  const opponent = $("opponent-hand");
  opponent.innerHTML = "";
  for (const id of game.opponent.known) opponent.appendChild(cardElement(id, "known"));
  for (let i = game.opponent.known.length; i < game.opponent.count; i++) {
    opponent.appendChild(backElement());
  }

  // expeditions: one row per colour, the agent's cards left, yours right, running scores
  const table = $("expeditions");
  table.innerHTML = "<tr><th>agent</th><th></th><th>colour</th><th></th><th>you</th></tr>";
  info.colors.forEach((name, c) => {
    const row = table.insertRow();
    const theirs = row.insertCell();
    for (const id of game.expeditions.agent[c]) theirs.appendChild(cardElement(id));
    row.insertCell().textContent = game.expeditions.agent[c].length ?
      game.expedition_scores.agent[c] : "";
    const colour = row.insertCell();
    colour.textContent = name;
    colour.className = `c${c} colour`;
    row.insertCell().textContent = game.expeditions.you[c].length ?
      game.expedition_scores.you[c] : "";
    const mine = row.insertCell();
    for (const id of game.expeditions.you[c]) mine.appendChild(cardElement(id));
  });

  // discard piles and the deck: clickable when drawing there is legal
  const piles = $("piles");
  piles.innerHTML = "";
  game.piles.forEach((pile) => {
    const button = document.createElement("button");
    button.className = "pile";
    button.dataset.testid = `pile-${pile.color}`;
    button.setAttribute("data-testid", `pile-${pile.color}`);
    const action = 2 * h + 1 + pile.color;
    button.disabled = !legalAction(action);
    if (pile.top !== null) button.appendChild(cardElement(pile.top));
    const size = document.createElement("small");
    size.textContent = `${info.colors[pile.color]} (${pile.size})`;
    button.appendChild(size);
    button.onclick = () => move(action);
    piles.appendChild(button);
  });
  const deck = $("deck");
  deck.textContent = `Deck (${game.deck})`;
  deck.disabled = !legalAction(2 * h);
  deck.onclick = () => move(2 * h);

  // your hand, sorted by the engine; a card is picked, then played or discarded
  const hand = $("hand");
  hand.innerHTML = "";
  game.hand.forEach((id, slot) => {
    const el = cardElement(id, selected === slot ? "selected" : "");
    el.setAttribute("data-testid", `card-${slot}`);
    const usable = legalAction(slot) || legalAction(h + slot);
    el.classList.toggle("usable", usable);
    el.onclick = () => { if (usable) { selected = slot; render(); } };
    hand.appendChild(el);
  });
  const picked = selected !== null && selected < game.hand.length;
  $("play").disabled = !(picked && legalAction(selected));
  $("discard").disabled = !(picked && legalAction(h + selected));
  $("hint").disabled = game.to_move !== "you";
  if (!game.over && game.to_move !== "you") $("hint-box").classList.add("hidden");

  // the log, newest last
  const log = $("log");
  log.innerHTML = "";
  for (const entry of game.log) {
    const item = document.createElement("li");
    item.className = entry.who;
    let text = entry.text;
    if (entry.prob !== undefined) text += ` (p=${entry.prob.toFixed(2)})`;
    if (entry.forced) text += " (your only move)";
    item.textContent = text;
    log.appendChild(item);
  }
  log.scrollTop = log.scrollHeight;

  if (game.over) renderFinal();
}

function renderFinal() {
  const result = game.result;
  $("final-title").textContent = result.winner === "draw" ? "A draw" :
    (result.winner === "you" ? `You win by ${result.you - result.agent}` :
      `The agent wins by ${result.agent - result.you}`) + ` (${result.ended_by})`;
  const table = $("final-scores");
  table.innerHTML = "<tr><th>colour</th><th>you</th><th>agent</th></tr>";
  info.colors.forEach((name, c) => {
    const row = table.insertRow();
    row.insertCell().textContent = name;
    row.insertCell().textContent = game.expedition_scores.you[c];
    row.insertCell().textContent = game.expedition_scores.agent[c];
  });
  const total = table.insertRow();
  total.className = "total";
  total.insertCell().textContent = "total";
  total.insertCell().textContent = result.you;
  total.insertCell().textContent = result.agent;
}

async function move(action) {
  if (!game || game.over || !legalAction(action)) return;
  showError(null);
  try {
    game = await api("POST", `/api/games/${game.game_id}/move`,
      {action, decision: game.decision});
    selected = null;
    $("hint-box").classList.add("hidden");
    render();
  } catch (error) {
    showError(error);
  }
}

async function hint() {
  if (!game || game.to_move !== "you") return;
  try {
    const answer = await api("GET", `/api/games/${game.game_id}/hint`);
    const box = $("hint-box");
    box.innerHTML = "";
    const title = document.createElement("strong");
    title.textContent = "The agent's policy here: ";
    box.appendChild(title);
    const moves = answer.moves.slice().sort((a, b) => b.prob - a.prob);
    box.appendChild(document.createTextNode(
      moves.map((m) => `${m.text} ${(100 * m.prob).toFixed(0)}%`).join(" · ")));
    box.classList.remove("hidden");
  } catch (error) {
    showError(error);
  }
}

// ----- keyboard ------------------------------------------------------------------------

function onKey(event) {
  if (event.target.tagName === "INPUT" || event.target.tagName === "SELECT") return;
  const screenName = document.body.dataset.screen;
  if (screenName === "final" && event.key.toLowerCase() === "n") return newGame();
  if (screenName !== "game" || game.to_move !== "you") return;
  const h = info.rules.hand_size;
  const key = event.key.toLowerCase();
  if (key === "h") return hint();
  if (game.phase === "card") {
    if (/^[1-9]$/.test(key) && Number(key) <= game.hand.length) {
      selected = Number(key) - 1;
      return render();
    }
    if (key === "p" && selected !== null) return move(selected);
    if (key === "d" && selected !== null) return move(h + selected);
  } else if (game.phase === "draw") {
    if (key === "0") return move(2 * h);
    if (/^[1-9]$/.test(key)) return move(2 * h + Number(key));
  }
}

function newGame() {
  game = null;
  selected = null;
  screen("start");
  $("start-button").focus();
}

window.addEventListener("DOMContentLoaded", async () => {
  $("start-form").addEventListener("submit", startGame);
  $("play").onclick = () => selected !== null && move(selected);
  $("discard").onclick = () => selected !== null && move(info.rules.hand_size + selected);
  $("hint").onclick = hint;
  $("new-game").onclick = newGame;
  document.addEventListener("keydown", onKey);
  try {
    await loadInfo();
  } catch (error) {
    showError(error);
  }
});
