// keras-vit-export --web: classify a picked, dropped or camera image with MediaPipe Tasks for Web's ImageClassifier
// (the .tflite's own metadata scales the pixels), and show the top 5 classes and the latency. No build step.
import {FilesetResolver, ImageClassifier} from "./vendor/tasks-vision/vision_bundle.mjs";

const $ = (id) => document.getElementById(id);
const model = document.body.dataset.model;
let classifier = null;
let labels = [];

// An error clears the previous image's results, so that they are never read as this one's.
function say(text, error = false) {
  $("status").textContent = text;
  $("status").className = error ? "error" : "";
  if (error) {
    $("results").replaceChildren();
    $("latency").textContent = "";
  }
}

// The first line of an error, short: MediaPipe's own errors carry a long source trace.
const firstLine = (error) => String(error && error.message || error).split("\n")[0].slice(0, 200);

function show(result, ms) {
  const categories = [...result.classifications[0].categories].sort((a, b) => b.score - a.score).slice(0, 5);
  $("results").replaceChildren(...categories.map((c) => {
    const item = document.createElement("li");
    item.innerHTML = '<span class="label"></span><span class="score"></span>';
    item.querySelector(".label").textContent = c.categoryName || labels[c.index] || String(c.index);
    item.querySelector(".score").textContent = `${(100 * c.score).toFixed(1)}%`;
    return item;
  }));
  $("latency").textContent = `${ms.toFixed(1)} ms in the browser (one image, MediaPipe on the CPU)`;
}

function classify(source, name) {
  if (!classifier) {
    say("The model is not loaded yet.", true);
    return;
  }
  try {
    const start = performance.now();
    const result = classifier.classify(source);
    show(result, performance.now() - start);
    say(`Classified ${name}.`);
  } catch (error) {
    say(`${name} could not be classified: ${firstLine(error)}`, true);
  }
}

function pick(file) {
  if (!file) return;
  const image = $("preview");
  if (!file.type.startsWith("image/")) {
    image.hidden = true;
    say(`${file.name} is not an image (${file.type || "unknown type"}): pick a PNG, JPEG, WebP or GIF file.`, true);
    return;
  }
  image.onload = () => {
    if (!image.naturalWidth || !image.naturalHeight) {  // e.g. an SVG without width and height
      image.hidden = true;
      say(`${file.name} has no size in pixels: give an image with a width and height.`, true);
      return;
    }
    image.hidden = false;
    // MediaPipe is given the file's decoded picture at its natural size, turned upright by its EXIF Orientation
    // as keras_vit.data and the preview do (docs/app_contract.md), never the CSS-scaled preview itself.
    // No colour-space conversion: keras_vit.data (training) reads the stored values, not colour-managed ones.
    createImageBitmap(file, {imageOrientation: "from-image", colorSpaceConversion: "none"}).then((bitmap) => {
      classify(bitmap, file.name);
      bitmap.close();
    }, (error) => say(`${file.name} could not be decoded: ${firstLine(error)}`, true));
  };
  image.onerror = () => { image.hidden = true; say(`${file.name} could not be read as an image.`, true); };
  image.src = URL.createObjectURL(file);
}

$("file").addEventListener("change", (event) => pick(event.target.files[0]));
const drop = $("drop");
drop.addEventListener("dragover", (event) => { event.preventDefault(); drop.classList.add("over"); });
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (event) => {
  event.preventDefault();
  drop.classList.remove("over");
  pick(event.dataTransfer.files[0]);
});
$("camera").addEventListener("click", async () => {
  try {
    const video = $("video");
    video.srcObject = await navigator.mediaDevices.getUserMedia({video: {facingMode: "environment"}});
    video.style.display = "block";
    await video.play();
    $("snap").hidden = false;
  } catch (error) {
    say(`The camera could not be opened: ${firstLine(error)}`, true);
  }
});
$("snap").addEventListener("click", () => classify($("video"), "the camera frame"));

try {
  const text = await (await fetch("labels.txt")).text();
  labels = text.split("\n").filter((line) => line.length);
} catch (error) {
  labels = [];
}
try {
  const fileset = await FilesetResolver.forVisionTasks(new URL("./vendor/tasks-vision/wasm", location.href).href);
  classifier = await ImageClassifier.createFromOptions(
      fileset, {baseOptions: {modelAssetPath: model, delegate: "CPU"}, maxResults: -1, runningMode: "IMAGE"});
  classifier.classify(new ImageData(32, 32));  // warm-up: the first call sets MediaPipe up, and is not the latency
  say(`Ready: pick or drop an image, or use the camera.`);
  document.body.dataset.ready = "true";
} catch (error) {
  say(`The model failed to load (${model}): ${firstLine(error)}`, true);
  document.body.dataset.ready = "failed";
}
