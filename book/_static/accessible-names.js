/* Two of the theme's buttons are named (aria-label) other than what they show, so
   speech users who say what they see ("click Search Ctrl K") miss them (WCAG 2.5.3,
   axe rule label-content-name-mismatch). Both buttons exist only with JavaScript
   (the theme hides them otherwise), so fixing them here is enough.

   - The search field reads "Search Ctrl+K" but is named "Search": without the
     aria-label its name is its visible text.
   - The colour-mode button shows one icon whose title is the current mode
     ("Light", "Dark", "System Settings") but is named "Color mode": its name
     becomes "Color mode: <that title>", kept in step when the mode changes. */
const MODE_TITLES = { light: "Light", dark: "Dark", auto: "System Settings" };

function nameColorModeButtons() {
  const mode = document.documentElement.dataset.mode || "auto";
  document.querySelectorAll(".theme-switch-button").forEach((button) =>
    button.setAttribute("aria-label", `Color mode: ${MODE_TITLES[mode] || mode}`));
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll(".search-button-field[aria-label]").forEach((button) => button.removeAttribute("aria-label"));
  nameColorModeButtons();
  new MutationObserver(nameColorModeButtons).observe(document.documentElement, { attributeFilter: ["data-mode"] });
});
