/* occupy's edit lease for a Django admin change form (EditLeaseAdminMixin).
 *
 * Reads its settings from #occupy-lease (data-* attributes) and the tokens from the
 * form's hidden _occupy_lease inputs. Editing: renews every ttl/3 while the page is
 * open (hidden or not), asks every few seconds (a read) whether this tab still holds
 * the lease, so a takeover or a force release shows within seconds; releases with a
 * beacon on pagehide, takes the lease again when the page comes back from the
 * back/forward cache, and puts its tab id in the address so that a reload keeps the
 * lease. A lost lease disables Save and Delete and keeps the user's input; once the
 * object is free, "Edit again" takes it again with the input kept. Read-only (someone
 * else edits, or the lock store is down): asks every few seconds whether that is over
 * and reloads the page (editable) once it is. The admin's lock settings wrong
 * (data-misconfigured, or a 503 marked misconfigured): nothing changes until they are
 * fixed, so it says so and asks nothing more. Every request carries the CSRF token.
 * What it says is translated by the page (.occupy-texts, in the active language).
 */
(function () {
  "use strict";

  function init() {
    var box = document.getElementById("occupy-lease");
    if (!box) {
      return;
    }
    var form = box.closest("form");
    var csrfInput = document.querySelector("input[name=csrfmiddlewaretoken]");
    var csrf = csrfInput ? csrfInput.value : "";
    var ttl = parseFloat(box.dataset.ttl) || 60;
    var poll = parseFloat(box.dataset.poll) || 2;
    var check = parseFloat(box.dataset.check) || 3;
    var state = box.dataset.state;
    var misconfigured = box.dataset.misconfigured === "1";
    var submitting = false;
    var timers = [];
    var message = box.querySelector(".occupy-message");
    var actions = box.querySelector(".occupy-actions");
    var again = box.querySelector(".occupy-edit-again");

    function tokens() {
      return Array.prototype.map.call(
        box.querySelectorAll("input[name=_occupy_lease]"),
        function (input) { return input.value; }
      );
    }

    function setTokens(values) {
      box.querySelectorAll("input[name=_occupy_lease]").forEach(function (input) {
        input.remove();
      });
      values.forEach(function (value) {
        var input = document.createElement("input");
        input.type = "hidden";
        input.name = "_occupy_lease";
        input.value = value;
        box.appendChild(input);
      });
    }

    function body(extra) {
      var data = new FormData();
      data.append("csrfmiddlewaretoken", csrf);
      data.append("_occupy_tab", box.dataset.tab);
      tokens().forEach(function (token) { data.append("_occupy_lease", token); });
      Object.keys(extra || {}).forEach(function (name) { data.append(name, extra[name]); });
      return data;
    }

    function say(text, level) {
      if (!message) {
        return;
      }
      message.textContent = text;
      message.className = "occupy-message " + level;
      message.hidden = false;
    }

    function text(name, values) {
      /* The page's translation of sentence `name`, each {key} of `values` filled in. */
      var node = box.querySelector(".occupy-texts [data-text='" + name + "']");
      var result = node ? node.textContent : name;
      Object.keys(values || {}).forEach(function (key) {
        result = result.split("{" + key + "}").join(values[key]);
      });
      return result;
    }

    function timeOf(iso) {
      return iso ? new Date(iso).toLocaleTimeString() : "";
    }

    function saveButtons() {
      return form ? form.querySelectorAll(
        "input[type=submit]:not([formaction]), button[type=submit]:not([formaction])"
      ) : [];
    }

    function deleteLinks() {
      return document.querySelectorAll(".submit-row .deletelink, .deletelink-box a");
    }

    function enableWriting(yes) {
      saveButtons().forEach(function (button) { button.disabled = !yes; });
      deleteLinks().forEach(function (link) {
        if (yes) {
          if (link.dataset.occupyHref) {
            link.href = link.dataset.occupyHref;
          }
          link.removeAttribute("aria-disabled");
        } else {
          if (link.getAttribute("href")) {
            link.dataset.occupyHref = link.getAttribute("href");
          }
          link.removeAttribute("href");
          link.setAttribute("aria-disabled", "true");
        }
        link.classList.toggle("occupy-disabled", !yes);
      });
    }

    function setState(name) {
      state = name;
      box.dataset.state = name;
      document.body.classList.toggle("occupy-lease-lost", name === "lost");
    }

    function every(seconds, fn) {
      timers.push(window.setInterval(fn, seconds * 1000));
    }

    function stop() {
      timers.forEach(function (timer) { window.clearInterval(timer); });
      timers = [];
    }

    function showAgain(yes) {
      if (again && actions) {
        again.hidden = !yes;
        actions.hidden = !yes;
      }
    }

    function editingSaid(until) {
      var version = box.dataset.version;
      say(text(version ? "editing-version" : "editing",
        {version: version, until: timeOf(until)}), "info");
    }

    function lost(data) {
      stop();
      setState("lost");
      enableWriting(false);
      say(data && data.message ? data.message : text("lost"), "error");
      every(poll, watchFree);
    }

    function watchFree() {
      /* Lost: once the object is free, offer to take it again, keeping the input. */
      status().then(function (data) {
        if (data && state === "lost") {
          showAgain(!!data.free);
        }
      });
    }

    function status() {
      return fetch(box.dataset.statusUrl + "?_occupy_tab=" + encodeURIComponent(
        box.dataset.tab), {credentials: "same-origin"}).then(function (response) {
        return response.json().then(function (data) {
          data.httpStatus = response.status;
          return data;
        });
      }).catch(function () { return null; });
    }

    function unavailable(data) {
      box.dataset.storeDown = "1";
      say(data && data.message ? data.message : text("unavailable"), "error");
      if (data && data.misconfigured) {
        /* No renewal or check succeeds until the settings are fixed: stop asking. */
        misconfigured = true;
        stop();
      }
    }

    function renew(reacquire) {
      return fetch(box.dataset.renewUrl, {
        method: "POST",
        body: body(reacquire ? {reacquire: "1"} : {}),
        credentials: "same-origin",
        headers: {"X-CSRFToken": csrf}
      }).then(function (response) {
        return response.json().then(function (data) {
          if (response.ok) {
            setTokens(data.tokens);
            box.dataset.until = data.until;
            if (state !== "editing") {
              setState("editing");
              showAgain(false);
              enableWriting(true);
            }
            editingSaid(data.until);
            return;
          }
          if (response.status === 503) {
            unavailable(data);
          } else if (response.status === 409) {
            if (reacquire && state !== "lost") {
              readOnly(data);
            } else {
              lost(data);
            }
          }
        });
      }).catch(function () {
        /* The network failed: try again at the next beat; the server decides. */
      });
    }

    function stillMine() {
      status().then(function (data) {
        if (!data || state !== "editing" || misconfigured) {
          return;
        }
        if (data.httpStatus === 503) {
          unavailable(data);
        } else if (data.httpStatus === 200 && !data.mine) {
          lost(data);
        } else if (data.httpStatus === 200 && box.dataset.storeDown === "1") {
          editingSaid(box.dataset.until);  /* the store is back */
        }
        box.dataset.storeDown = data.httpStatus === 503 ? "1" : "";
      });
    }

    function readOnly(data) {
      stop();
      setState("readonly");
      if (form) {
        form.querySelectorAll("input, select, textarea, button").forEach(function (el) {
          if (el.type !== "hidden") {
            el.disabled = true;
          }
        });
      }
      say(text(data.since ? "readonly-since" : "readonly", {
        holder: data.holder || text("someone-else"),
        since: timeOf(data.since),
        until: timeOf(data.until)
      }), "warning");
      every(poll, checkFree);
    }

    function editing() {
      stop();
      every(ttl / 3, function () { renew(false); });
      every(check, stillMine);
    }

    function ownUrl() {
      /* This page's address with this tab's id: a reload asks for the tab's lease. */
      var url = new URL(window.location.href);
      url.searchParams.set("_occupy_tab", box.dataset.tab);
      return url.toString();
    }

    function checkFree() {
      status().then(function (data) {
        if (data && data.httpStatus === 200 && (data.free || state === "unavailable")) {
          stop();
          window.location.replace(ownUrl());
        }
      });
    }

    if (form) {
      form.addEventListener("submit", function () { submitting = true; });
    }
    if (again) {
      again.addEventListener("click", function () {
        renew(true).then(function () {
          if (state === "editing") {
            editing();
          }
        });
      });
    }

    window.addEventListener("pagehide", function () {
      if (state === "editing" && !submitting && navigator.sendBeacon) {
        navigator.sendBeacon(box.dataset.releaseUrl, body());
      }
      stop();
    });

    window.addEventListener("pageshow", function (event) {
      if (!event.persisted) {
        return;
      }
      submitting = false;
      if (misconfigured) {
        return;
      }
      if (state === "editing") {  /* back from the bfcache: the beacon let it go */
        renew(true).then(function () {
          if (state === "editing") {
            editing();
          }
        });
      } else if (state === "readonly" || state === "unavailable") {
        every(poll, checkFree);
      }
    });

    if (misconfigured) {
      /* Nothing to renew or wait for: the page says why it cannot save. */
    } else if (state === "editing") {
      if (window.history && window.history.replaceState) {
        /* A reload asks for this tab's own lease, which it takes over from itself. */
        window.history.replaceState(window.history.state, "", ownUrl());
      }
      editing();
    } else if (state === "readonly" || state === "unavailable") {
      every(poll, checkFree);
    } else if (state === "lost") {
      enableWriting(false);
      every(poll, watchFree);
    }
    document.body.classList.toggle("occupy-lease-lost", state === "lost");
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
}());
