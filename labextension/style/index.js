import './base.css';
import './costs.css';
import './estimate.css';
import './jobpage.css';
import './notebook.css';
