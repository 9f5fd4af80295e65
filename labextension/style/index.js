import './base.css';
import './costs.css';
