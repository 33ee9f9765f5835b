// The meshrelay web UI: hash routes over the UI's API, kept live by the
// server-sent status events.
import "./style.css";
import { getJSON, login, logout, Unauthorized, type Status } from "./api";
import { h } from "./dom";
import { pages, views } from "./views";

const app = document.getElementById("app")!;
const live = document.getElementById("live")!;
const nav = document.getElementById("nav")!;

let status: Status | null = null;
let events: EventSource | null = null;
let rendering = 0;

function go(r: string) {
  location.hash = "#" + r;
}

function currentRoute(): string[] {
  const path = location.hash.replace(/^#\/?/, "");
  return path ? path.split("/").map(decodeURIComponent) : [];
}

// render draws the current route: a view from the latest status, a page
// (pages) from its own fetches. While the UI starts (early), a page is
// drawn before the status is in.
async function render(early = false) {
  const [name = "", ...args] = currentRoute();
  const page = pages[name];
  const view = views[name] ?? views[""];
  const st = status;
  let draw: (() => Promise<HTMLElement>) | undefined;
  if (page && (st || early)) draw = () => page({ args, go });
  else if (!page && st) draw = () => view({ status: st, args, go });
  if (!draw) return;
  const ticket = ++rendering;
  try {
    const el = await draw();
    if (ticket !== rendering) return; // a newer render started meanwhile
    // Live updates redraw the page: keep what the reader opened.
    const open = new Set([...app.querySelectorAll("details[open]")].map((d) => d.getAttribute("data-key")));
    for (const d of el.querySelectorAll("details")) {
      if (open.has(d.getAttribute("data-key"))) d.setAttribute("open", "");
    }
    // A page kept across updates (the fleet's, a policy's) is already
    // shown: replacing it would lose the reader's focus.
    if (app.firstElementChild !== el || app.childElementCount !== 1) app.replaceChildren(el);
  } catch (err) {
    if (err instanceof Unauthorized) return showLogin(err.message);
    if (ticket === rendering) app.replaceChildren(h("p", { class: "error" }, String(err)));
  }
}

function showLogin(reason?: string) {
  status = null;
  events?.close();
  events = null;
  live.textContent = "offline";
  live.className = "live";
  nav.replaceChildren();
  const input = h("input", {
    type: "password",
    name: "token",
    id: "token",
    autocomplete: "current-password",
    placeholder: "admin token",
    required: true,
  }) as HTMLInputElement;
  const msg = h("p", { class: "error", id: "login-error" }, reason && reason !== "Unauthorized" ? reason : "");
  const form = h(
    "form",
    {
      id: "login",
      // Without the script, a POST keeps the token out of the URL.
      method: "post",
      onsubmit: async (e: Event) => {
        e.preventDefault();
        try {
          await login(input.value);
          await start();
        } catch (err) {
          msg.textContent = err instanceof Error ? err.message : String(err);
        }
      },
    },
    h("h1", {}, "Log in to meshrelay"),
    h("p", { class: "muted" }, "Paste the admin token (DATA-DIR/admin-token of meshrelay server, or --admin-token-file)."),
    input,
    h("button", { type: "submit" }, "Log in"),
    msg,
  );
  app.replaceChildren(form);
  input.focus();
}

function connect() {
  events?.close();
  events = new EventSource("/api/events");
  events.addEventListener("status", (e) => {
    status = JSON.parse((e as MessageEvent).data) as Status;
    live.textContent = "live";
    live.className = "live on";
    render();
  });
  events.addEventListener("failed", () => start());
  events.onerror = () => {
    live.textContent = "reconnecting";
    live.className = "live";
    if (events?.readyState === EventSource.CLOSED) start();
  };
}

async function start() {
  // A page needs no status: it is fetched beside it.
  render(true);
  try {
    status = await getJSON<Status>("/api/status");
  } catch (err) {
    if (err instanceof Unauthorized) return showLogin(err.message);
    app.replaceChildren(h("p", { class: "error" }, `Cannot reach the server: ${err}; retrying…`));
    setTimeout(start, 2000);
    return;
  }
  nav.replaceChildren(
    h("a", { href: "#/" }, "Fleet"),
    h("a", { href: "#/rollout", id: "nav-rollout" }, "Rollout"),
    h(
      "button",
      {
        class: "linkish",
        id: "logout",
        onclick: async () => {
          await logout();
          showLogin();
        },
      },
      "Log out",
    ),
  );
  connect();
  render();
}

window.addEventListener("hashchange", () => render());
start();
