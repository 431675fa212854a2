/* occupy's edit lease for a Django admin change form (EditLeaseAdminMixin).
 *
 * Reads its settings from #occupy-lease (data-* attributes) and the tokens from the
 * form's hidden _occupy_lease inputs. Editing: renews every ttl/3 while the page is
 * open (hidden or not), releases with a beacon on pagehide, takes the lease again when
 * the page comes back from the back/forward cache; a lost lease disables Save and
 * keeps the user's input. Read-only: asks every few seconds whether the lease is free
 * and reloads the page (editable) once it is. Every request carries the CSRF token.
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
    var state = box.dataset.state;
    var submitting = false;
    var timer = null;
    var message = box.querySelector(".occupy-message");

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
    }

    function timeOf(iso) {
      return iso ? new Date(iso).toLocaleTimeString() : "";
    }

    function saveButtons() {
      return form ? form.querySelectorAll(
        "input[type=submit], button[type=submit]:not([formaction])"
      ) : [];
    }

    function setState(name) {
      state = name;
      box.dataset.state = name;
      document.body.classList.toggle("occupy-lease-lost", name === "lost");
    }

    function lost(data) {
      stop();
      setState("lost");
      saveButtons().forEach(function (button) { button.disabled = true; });
      say(data && data.message ? data.message
        : "Your edit lease was lost: nothing can be saved from this page.", "error");
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
      say((data.holder || "Someone else") + " is editing this object" +
        (data.since ? " since " + timeOf(data.since) : "") + ", until " +
        timeOf(data.until) + ". This page turns editable when they are done.", "warning");
      timer = window.setInterval(checkFree, poll * 1000);
    }

    function stop() {
      if (timer !== null) {
        window.clearInterval(timer);
        timer = null;
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
              saveButtons().forEach(function (button) { button.disabled = false; });
            }
            say("You are editing" + (box.dataset.version ? " version " + box.dataset.version
              : "") + ": others see this object read-only until you save or leave " +
              "(lease until " + timeOf(data.until) + ").", "info");
            return;
          }
          if (response.status === 409) {
            if (reacquire) {
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

    function heartbeat() {
      stop();
      timer = window.setInterval(function () { renew(false); }, ttl * 1000 / 3);
    }

    function checkFree() {
      fetch(box.dataset.statusUrl, {credentials: "same-origin"}).then(function (response) {
        return response.json();
      }).then(function (data) {
        if (data.free) {
          stop();
          window.location.reload();
        }
      }).catch(function () {});
    }

    if (form) {
      form.addEventListener("submit", function () { submitting = true; });
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
      if (state === "editing") {  /* back from the bfcache: the beacon let it go */
        renew(true).then(function () {
          if (state === "editing") {
            heartbeat();
          }
        });
      } else if (state === "readonly") {
        timer = window.setInterval(checkFree, poll * 1000);
      }
    });

    if (state === "editing") {
      heartbeat();
    } else if (state === "readonly") {
      timer = window.setInterval(checkFree, poll * 1000);
    } else if (state === "lost") {
      saveButtons().forEach(function (button) { button.disabled = true; });
    }
    document.body.classList.toggle("occupy-lease-lost", state === "lost");
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
}());
